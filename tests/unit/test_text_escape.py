"""Text a traced process controls, as every view shows it: each character a
terminal could act on written as a visible escape, never cut inside one, and
no view that lets one through (rendered to a terminal console, as a user
would see it)."""

from __future__ import annotations

import codecs
import io
import json
import re

import pytest
from rich.console import Console

from cudaprobe.analysis.gpustats import GpuRow, GpuStats
from cudaprobe.analysis.nccl import NcclStats, SizeRow
from cudaprobe.analysis.nccl_shapes import MIXED
from cudaprobe.analysis.stats import FunctionStats, StatsReport
from cudaprobe.analysis.stats_compare import Change
from cudaprobe.analysis.summary import Untraced
from cudaprobe.doctor.checks import Check
from cudaprobe.output.compare_view import render_changes
from cudaprobe.output.doctor_view import render_checks
from cudaprobe.output.memory_view import render_exit, render_processes
from cudaprobe.output.stats_view import render_stats
from cudaprobe.output.text import (
    cells,
    cut_end,
    cut_middle,
    cut_start,
    escape,
    json_escape,
    pad,
    terminal_lines,
)

from .test_memory_view import accounting, ms

C0 = [chr(c) for c in range(0x20)]
C1 = [chr(c) for c in range(0x80, 0xA0)]
BIDI = [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]
# an ESC sequence that clears the screen, an OSC that sets the window title,
# a bidi override, a line separator, a byte that was not UTF-8, a C1 CSI
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\u202e\u2028\udc9b\x9b1m[bold]x"
HOSTILE_SHOWN = "\\x1b[2J\\x1b]0;pwned\\x07\\u202e\\u2028\\udc9b\\x9b1m[bold]x"
SGR = re.compile(r"\x1b\[[0-9;]*m")


def test_every_unprintable_character_is_a_visible_escape():
    special = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
    for char in [*C0, "\x7f", *C1]:
        assert escape(char) == special.get(char, f"\\x{ord(char):02x}")
    for char in [*BIDI, "\u2028", "\u2029", "\u200b", "\ufeff", "\ue000", "\udc80"]:
        assert escape(char) == f"\\u{ord(char):04x}"
    # beyond the BMP: eight digits, so that a digit after it is not read as its
    assert escape("\U000e00011") == "\\U000e00011"
    assert escape("\\") == "\\\\" and escape(HOSTILE) == HOSTILE_SHOWN
    # printable text stays itself: markup is literal in rich Text, CJK is shown
    assert escape("[bold]x[/bold]") == "[bold]x[/bold]"
    assert escape("日本語のカーネル") == "日本語のカーネル"


def test_an_escape_is_never_ambiguous_and_always_printable():
    samples = [HOSTILE, "a\\x1b", "\\\\n\n", "".join(C0 + C1 + BIDI) + "\U000e0001\U0010fffe"]
    for text in samples:
        shown = escape(text)
        assert shown.isprintable()
        # read back as Python reads escapes: the very text
        ascii_shown = shown.encode("ascii", "backslashreplace")
        assert codecs.decode(ascii_shown, "unicode_escape") == text


def whole_units(cut: str, escaped: str) -> bool:
    """Every part of `cut` around its `…` is a run of whole units of `escaped`."""
    units = re.findall(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|.)|.", escaped)
    prefixes = {"".join(units[:k]) for k in range(len(units) + 1)}
    suffixes = {"".join(units[k:]) for k in range(len(units) + 1)}
    head, _, tail = cut.partition("…")
    return (head in prefixes or head.lstrip(" ") in prefixes) and tail in suffixes


@pytest.mark.parametrize("cut", [cut_end, cut_middle, cut_start])
def test_a_cut_never_splits_an_escape_or_a_wide_character(cut):
    for name in (HOSTILE, "日本語のカーネル名前", "x\x1b" * 9):
        escaped = escape(name)
        for width in range(1, cells(escaped) + 2):
            shown = cut(escaped, width)
            assert cells(shown) <= width, (shown, width)
            assert whole_units(shown, escaped), (shown, width)
            assert cells(pad(shown, width)) == width == cells(pad(shown, width, right=True))
    assert cut_middle("日本語のカーネル名前", 9) == "日本…名前"  # 4 + 1 + 4 cells


def test_data_formats_on_a_terminal_keep_their_line_ends_and_json_its_data():
    row = 'x,"\x1b[2J\x1b]0;t\x07",y\r\n2,\u202e,z\r\n'
    assert terminal_lines(row) == 'x,"\\x1b[2J\\x1b]0;t\\x07",y\r\n2,\\u202e,z\r\n'
    assert terminal_lines("plain,ascii\r\n") == "plain,ascii\r\n"
    doc = {"process": HOSTILE, "kernel": "k\U000e0001\x7f", "wide": "日本"}
    text = json.dumps(doc, ensure_ascii=False) + "\n"
    shown = terminal_lines(text, json_escape)
    assert shown.replace("\n", "").isprintable() and "日本" in shown
    assert json.loads(shown) == doc


def terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=100, force_terminal=True, color_system="standard"), out


def assert_safe(out: str) -> None:
    """Nothing but SGR colour sequences acts on the terminal; the name is shown escaped."""
    rest = SGR.sub("", out)
    assert not any(c in rest for c in [*C0, "\x7f", *C1] if c != "\n"), repr(rest)
    assert not any(c in rest for c in BIDI)


def test_every_view_escapes_the_process_controlled_text():
    checks = []
    console, out = terminal()
    # stats: a function's row, GPU time per kernel, NCCL, and a not-traced note
    report = StatsReport([FunctionStats(HOSTILE, "runtime", "memory", count=1, total_ns=5,
                                        min_ns=5, max_ns=5)],
                         untraced=[Untraced(7, HOSTILE, 1.0, "the attach")],
                         gpu=GpuStats([GpuRow(HOSTILE, [10])], [GpuRow(HOSTILE, [10], 8)]),
                         nccl=NcclStats([SizeRow(HOSTILE, MIXED, 7, 0, 2, 8, 8, 2, HOSTILE,
                                                 calls=1)], []))
    render_stats(report, console)
    checks.append(out.getvalue())
    # memory: the live table (process name) and the leak report (name, call site)
    console, out = terminal()
    processes = accounting().processes
    for p in processes.values():
        p.process = HOSTILE
    p = processes[7]
    p.ended[0].site = (f"{HOSTILE}+0x1 (/tmp/{HOSTILE}.so)",)
    render_processes(list(processes.values()), console, "live")
    render_exit(p, console, ms)
    checks.append(out.getvalue())
    console, out = terminal()
    render_changes([Change(HOSTILE, "count", 1, 9)], console, f"/tmp/{HOSTILE}.json", 20)
    render_changes([], console, f"/tmp/{HOSTILE}.json", 20)
    render_checks([Check("libraries", "ok", f"/home/u/{HOSTILE}", HOSTILE)], console)
    checks.append(out.getvalue())
    for text in checks:
        assert_safe(text)
        assert "\\x1b[2J" in text and "[bold]x" in text, text
