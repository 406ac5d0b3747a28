"""The table at any terminal width from 80: a header that never wraps, one line
per call, DETAILS cut with `…`, long names cut in the middle keeping their
suffix; the summary's errors never split. Rendered to a StringIO console of
each width, as a terminal of that width would show it."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.text import Text

from cudaprobe.output.table import COLUMNS, DETAILS_WANT, TableReporter, fit, layout
from cudaprobe.output.text import cut_middle, humanize_ns

from .test_reporters import calls, summary_for

WIDTHS = (80, 100, 120, 200)
LONG = "cudaLaunchCooperativeKernel_ptsz"


def render(width: int) -> list[str]:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=True, no_color=True,
                      color_system=None)
    cs = calls()
    cs[1].event = LONG
    cs[1].details = cs[1].details.replace("func=0x401000", "func=0x401000 kern(float*, int)")
    r = TableReporter(buf, console=console)
    r.start()
    r.calls(cs)
    summary = summary_for(cs)
    summary.add(cs)
    summary.add(cs)  # x3 of cudaErrorInsufficientDriver
    r.finish(summary)
    return Text.from_ansi(buf.getvalue()).plain.splitlines()


@pytest.mark.parametrize("width", WIDTHS)
def test_every_line_fits_and_the_header_is_one_line(width):
    lines = render(width)
    assert all(len(line) <= width for line in lines), [len(x) for x in lines]
    header, malloc, launch = lines[:3]
    titles = header.split()
    assert titles[:3] == ["TIME(ms)", "PROCESS", "PID"] and "EVENT" in titles
    assert titles[-1].startswith("D")  # DETAILS, cut where it must be
    event = titles.index("EVENT")
    assert malloc.split()[event] == "cudaMalloc" and launch.split()[event].endswith("_ptsz")
    assert launch.split()[event].startswith("cudaLaunc")
    assert "…" in launch or width >= 200  # DETAILS (or the name) cut at the edge
    if width >= 200:
        assert LONG in launch and "cudaErrorInsufficientDriver" in launch


@pytest.mark.parametrize("width", range(80, 241, 20))
def test_details_keep_30_characters_and_errors_stay_visible(width):
    """TID, RESULT and LATENCY fold into DETAILS where the line is too narrow
    for DETAILS to keep 30 characters; an error is said once, after what went
    in. (The calls' TID, 8, is not their PID, 7: DETAILS says it.)"""
    header, malloc, launch = render(width)[:3]
    start = header.index("DETAILS"[: width - header.rindex(" ") - 1])
    assert width - start >= 30
    shown = header.split()
    assert malloc[start:].startswith("size=4.0 KiB → devPtr=0x7f")
    if "RESULT" in shown:
        assert "cudaSuccess" in malloc and "Insuff" in launch
        assert "InsufficientDriver" not in launch[start:]  # said once
    else:  # folded: a success says nothing, an error its short name, after the arrow
        assert "→ Insuff" in launch[start:] and launch.count("Insuff") == 1
    # the kernel's name first: its parameters too where DETAILS has room
    assert launch[start:].startswith("kern(float*, int) gridDim=(1" if width >= 160 else "kern")
    if "…" not in malloc:
        assert malloc.endswith("0x7f0000000000" + ("" if "TID" in shown else " tid=8")
                               + ("" if "LATENCY" in shown else " <41.2µs>"))
    assert ("TID" in shown) == (width >= 120)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_summary_keeps_each_error_whole(width):
    """Each error whole on its row; where the whole names would cut a
    function's name, they go less their prefix first (InsufficientDriver x3)."""
    lines = render(width)
    row = next(line for line in lines if "x3" in line)
    assert "_ptsz" in row  # the name's suffix kept, cut or not
    if width < 100:  # 80 columns: the error less its prefix, the name cut in the middle
        assert " InsufficientDriver x3" in row and "cudaLaunchCoo" in row
    else:
        assert "cudaErrorInsufficientDriver x3" in row


def test_a_file_or_pipe_has_whole_details():
    buf = io.StringIO()  # not a terminal: no width to fit
    r = TableReporter(buf)
    r.start()
    r.calls(calls())
    text = buf.getvalue()
    assert ("func=0x401000 gridDim=(1,1,1) blockDim=(32,1,1) sharedMem=0 B stream=0x0 "
            "args=0x0") in text
    assert "…" not in text
    assert layout(None) == [c.width for c in COLUMNS]


def test_names_cut_in_the_middle_keep_their_suffix():
    assert cut_middle(LONG, 26) == "cudaLaunchCoo…eKernel_ptsz"
    assert len(cut_middle(LONG, 26)) == 26
    assert cut_middle("cudaMalloc", 26) == "cudaMalloc"
    assert cut_middle("    " + LONG, 20) == "    cudaLaun…el_ptsz"  # indentation kept


@pytest.mark.parametrize("width", range(80, 241, 7))
def test_layout_fits_every_width(width):
    widths = layout(width)
    assert sum(widths) + len(widths) < width
    for c, w in zip(COLUMNS, widths):
        assert (c.min_width or c.width) <= w and len(c.title) <= w
    shown, widths, folded = fit(width)
    assert width - sum(widths) - len(widths) >= DETAILS_WANT
    assert [c.title for c in shown][:3] == ["TIME(ms)", "PROCESS", "PID"]
    assert set(folded) <= {"TID", "RESULT", "LATENCY"}


def test_humanize_ns():
    assert humanize_ns(999) == "999ns" and humanize_ns(41_200) == "41.2µs"
    assert humanize_ns(2_500_000) == "2.50ms" and humanize_ns(3_000_000_000) == "3.00s"


def test_what_the_process_controls_is_escaped():
    """Its name and the text in DETAILS (kernel names come from its code): one
    line each, no byte that a terminal would act on."""
    from cudaprobe.output.text import escape  # noqa: PLC0415

    assert escape('a,"b\nc\\d') == 'a,"b\\nc\\\\d'
    assert escape("\x1b[31mred\x07") == "\\x1b[31mred\\x07"
    assert escape("\u202eevil") == "\\u202eevil" and escape("ünï kern<1>") == "ünï kern<1>"
    buf = io.StringIO()
    r = TableReporter(buf)
    cs = calls()
    cs[0].process = "\x1b[2Jx\ny"
    r.start()
    r.calls(cs)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 3 and "\x1b" not in buf.getvalue()
    assert " \\x1b[2Jx\\ny " in lines[1]
