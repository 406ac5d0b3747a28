"""The live table: rows streamed as calls complete, as fixed-width text under
one header, so every batch lines up; rich renders the header and summary.

The columns are data (`COLUMNS`): a title, the width it wants, how narrow it
may get, how its text is cut, and the cell of a call. `fit` fits them to
the terminal's width: one line per call and a header that never wraps, at
any width from 80; the columns that can give shrink (PROCESS, RESULT, then
EVENT) and DETAILS takes what is left, cut with `…`. Where that leaves
DETAILS less than DETAILS_WANT, columns fold into it, one at a time: TID
(said after the arguments, only where it is not the PID), RESULT (an
error's short name first, `InsufficientDriver:`, as strace says ENOENT; a
success not at all), then LATENCY (last, `<4.7µs>`, as strace -T): at 80 columns a row is
TIME, PROCESS, PID, EVENT and 30 characters of DETAILS. Names are cut in the
middle, so a variant's suffix stays (`cudaLaunchCoop…Kernel_ptsz`). To a
file or a pipe nothing limits the width: the columns have the width they
want and DETAILS is whole.

Rows come in call order (sessions/trace.py puts them so: decode.nesting's
CallOrder), a call made inside another indented under it.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Callable, TextIO

from rich.console import Console
from rich.text import Text

from cudaprobe.analysis.by_line import frame_text, user_frame
from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import gpu_span_ns
from cudaprobe.decode.pystacks import LENDERS_MANY
from cudaprobe.output.base import Reporter
from cudaprobe.output.reading import fit_reading, reading
from cudaprobe.output.summary_view import render_summary
from cudaprobe.output.text import cut_end, cut_middle, cut_start, escape, humanize_ns, pad

INDENT = "  "  # EVENT's, per level of nesting


@dataclass(frozen=True)
class Column:
    title: str
    width: int  # what it wants
    cell: Callable[[Call], str]
    justify: str = "left"
    min_width: int | None = None  # how narrow it may get; None: never narrower
    cut: Callable[[str, int], str] = cut_end

    def text(self, value: str, width: int) -> str:
        value = self.cut(value, width)
        if not value.isascii() and not value.replace("…", "", 1).isascii():  # a wide one: 2 cells
            return pad(value, width, self.justify == "right")
        return value.rjust(width) if self.justify == "right" else value.ljust(width)


def _event(c: Call) -> str:
    """Indented by its depth, as uftrace shows calls made inside a call."""
    return INDENT * c.depth + c.event if c.depth else c.event


def process_label(c: Call) -> str:
    """`python[r1]` for rank 1 of a job (decode/ranks.py), else the name."""
    return c.process if c.rank is None else f"{c.process}[r{c.rank}]"


def _latency(c: Call) -> str:
    return "-" if c.in_flight else humanize_ns(c.duration_ns)


def _result(c: Call) -> str:
    return "in flight" if c.in_flight else c.ret_name or ""


SUCCESS = {"cudaSuccess", "CUDA_SUCCESS"}
ERROR_PREFIXES = ("cudaError", "CUDA_ERROR_")


def less_prefix(name: str, prefixes: tuple[str, ...] = ERROR_PREFIXES) -> str:
    """`name` without the first of `prefixes` it starts with (and has more than)."""
    for prefix in prefixes:
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix):]
    return name


def cut_result(text: str, width: int) -> str:
    """RESULT in `width` cells: whole where it fits, else without its prefix
    (InsufficientDriver, not cudaEr…river; Success), cut at the end."""
    if len(text) <= width:
        return text
    return cut_end(less_prefix(text, ERROR_PREFIXES + ("cuda", "CUDA_")), width)


COLUMNS = (
    Column("TIME(ms)", 10, lambda c: f"{c.time_ms:.3f}", "right"),
    # cut in the middle: a rank's `[r1]` stays
    Column("PROCESS", 15, lambda c: escape(process_label(c)), min_width=8, cut=cut_middle),
    Column("PID", 7, lambda c: str(c.pid), "right"),
    Column("TID", 7, lambda c: str(c.tid), "right"),
    Column("EVENT", 26, _event, min_width=18, cut=cut_middle),
    Column("LATENCY", 9, _latency, "right"),
    Column("RESULT", 28, _result, min_width=12, cut=cut_result),
)
# --gpu-time: what the call's GPU work took, from its first start to its last end
GPU_COLUMN = Column("GPU TIME", 9,
                    lambda c: "-" if c.gpu is None else humanize_ns(gpu_span_ns(c.gpu)), "right")


def _py_line(c: Call) -> str:
    """--py-stacks: the innermost frame that is the program's own, as file:line;
    a stack lent by another thread ends with whose (cut_start keeps the end);
    a call of PyTorch's backward pass, its forward op's line, "(backward)"."""
    stack = c.py_stack
    if stack is not None and stack.forward:  # PyTorch's backward: its forward op's line
        f = user_frame(stack.forward)
        if f is not None:
            return f"{frame_text(f)} (backward)"
    if stack is not None and stack.missing is not None:
        return "(no lender)" if stack.missing == LENDERS_MANY else "(not read)"
    f = user_frame(stack.frames) if stack is not None else None
    if f is None:
        return "-"
    if stack.borrowed is None:
        return frame_text(f)
    tid = stack.borrowed["tid"]
    return f"{frame_text(f)} (lent by {tid})" if tid is not None else f"{frame_text(f)} (lent)"


PY_COLUMN = Column("PYTHON", 32, lambda c: escape(_py_line(c)), min_width=16, cut=cut_start)
DETAILS = "DETAILS"  # the last column: what the line has left
SHRINK_ORDER = ("PYTHON", "PROCESS", "RESULT", "EVENT")  # the first gives first
DETAILS_MIN = 8  # what the shrinking makes room for, where it can
EVENT_MAX = 40  # EVENT grows to this when the line is wide (LONG names whole)
DETAILS_ROOM = 60  # ... and DETAILS would still have this much
DETAILS_WANT = 30  # what DETAILS keeps at any width from 80: columns fold into it for it
# the first folds first; PROCESS (the PID stays) where the PYTHON column is shown
FOLD_ORDER = ("TID", "RESULT", "LATENCY", "PROCESS")
KERNEL_ROOM_MIN = 16  # a kernel's name takes half of DETAILS, at least this


def short_result(c: Call) -> str:
    """RESULT as DETAILS says it when RESULT is folded: nothing for a success,
    an error's name without its prefix (cudaErrorInsufficientDriver:
    InsufficientDriver), `in flight`."""
    if c.in_flight:
        return "in flight"
    name = c.ret_name or ""
    return "" if name in SUCCESS else less_prefix(name)


def folded_extra(c: Call, folded: tuple[str, ...]) -> str:
    """What the folded TID and LATENCY would have said, after DETAILS."""
    text = f" tid={c.tid}" if "TID" in folded and c.tid != c.pid else ""
    return f"{text} <{_latency(c)}>" if "LATENCY" in folded else text


def fit(width: int | None, columns: tuple[Column, ...] = COLUMNS
        ) -> tuple[tuple[Column, ...], list[int], tuple[str, ...]]:
    """The columns shown in a line of `width` characters, their widths, and the
    titles folded into DETAILS (FOLD_ORDER) so that it keeps DETAILS_WANT.
    Once LATENCY is folded every column gives what it can; PROCESS folds
    only beside PYTHON."""
    titles = {c.title for c in columns}
    order = [t for t in FOLD_ORDER if t in titles and (t != "PROCESS" or "PYTHON" in titles)]
    folded: tuple[str, ...] = ()
    while True:
        shown = tuple(c for c in columns if c.title not in folded)
        if width is None:
            return shown, layout(width, shown), folded
        widths = layout(width, shown, width if "LATENCY" in folded else DETAILS_WANT)
        if len(folded) == len(order) or width - sum(widths) - len(widths) >= DETAILS_WANT:
            return shown, widths, folded
        folded += (order[len(folded)],)


def layout(width: int | None, columns: tuple[Column, ...] = COLUMNS,
           details_min: int = DETAILS_MIN) -> list[int]:
    """Each column's width in a line of `width` characters (None: unlimited),
    the columns that can give shrinking for DETAILS to have `details_min`."""
    widths = [c.width for c in columns]
    if width is None:
        return widths
    index = {c.title: i for i, c in enumerate(columns)}
    used = sum(widths) + len(widths)  # each column and the space after it
    for title in (t for t in SHRINK_ORDER if t in index):  # those not folded into DETAILS
        i = index[title]
        give = min(max(0, used + details_min - width),
                   widths[i] - (columns[i].min_width or widths[i]))
        widths[i] -= give
        used -= give
    event = index["EVENT"]
    grow = min(EVENT_MAX - widths[event], width - used - DETAILS_ROOM)
    if grow > 0:
        widths[event] += grow
    return widths


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """rich's own ends the program with exit status 1; the caller says what
        a closed pipe means (cli.py: a quiet exit, the command's status kept)."""
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def make_console(stream: TextIO) -> Console:
    """A console that keeps rows on one line when writing to a file or pipe."""
    tty = stream.isatty() if hasattr(stream, "isatty") else False
    return _Console(file=stream, width=None if tty else 240, highlight=False,
                    soft_wrap=False, force_terminal=tty or None)


class TableReporter(Reporter):
    """Rows are formatted as plain fixed-width text (rich renders only the
    header and the summary): a rich Table per batch cost ~100 µs a row, which
    could not keep up with the ring buffer."""

    name = "table"
    extensions = (".txt", ".log", ".table")

    def __init__(self, stream: TextIO, console: Console | None = None,
                 gpu_time: bool = False, py_stacks: bool = False) -> None:
        super().__init__(stream, gpu_time, py_stacks)
        self.console = console or make_console(stream)
        self._color = self.console.is_terminal and not self.console.no_color
        # a terminal's width bounds the line; a file's or a pipe's does not
        self.width = self.console.width if self.console.is_terminal else None
        self._cells: list[tuple[Column, int]] = []
        self._folded: tuple[str, ...] = ()
        self._details_width: int | None = None
        self._kernel_room: int | None = None  # a kernel's name in DETAILS: its cells
        self._lay_out()

    def columns(self) -> tuple[Column, ...]:
        """The columns before DETAILS (--gpu-time adds GPU TIME, --py-stacks PYTHON)."""
        return (*COLUMNS, *((GPU_COLUMN,) if self.gpu_time else ()),
                *((PY_COLUMN,) if self.py_stacks else ()))

    def _lay_out(self) -> None:
        """Each column's width, and the columns folded into DETAILS."""
        columns, widths, self._folded = fit(self.width, self.columns())
        self._cells = list(zip(columns, widths))
        if self.width is not None:
            self._details_width = self.width - sum(widths) - len(widths)
            self._kernel_room = max(KERNEL_ROOM_MIN, self._details_width // 2)

    def start(self) -> None:
        header = " ".join(c.text(c.title, w) for c, w in self._cells) + " "
        if self._details_width is None:
            header += DETAILS
        else:
            header = header[: self.width] + cut_end(DETAILS, self._details_width)
        self.console.print(Text(header.rstrip(), style="bold"), no_wrap=True, crop=True)

    def calls(self, calls: list[Call]) -> None:
        if not calls:
            return
        lines = []
        details_width, cells, folded = self._details_width, self._cells, self._folded
        for c in calls:
            row = " ".join([column.text(column.cell(c), w) for column, w in cells])
            result = short_result(c) if "RESULT" in folded else ""
            details = escape(reading(c, result, self._kernel_room))
            extra = folded_extra(c, folded) if folded else ""
            if details_width is None:
                line = f"{row} {details}{extra}"
            else:
                line = f"{row} {fit_reading(details, result, extra, details_width)}".rstrip()
            if self._color and (c.ret or c.in_flight):
                line = f"\x1b[{33 if c.in_flight else 31}m{line}\x1b[0m"
            lines.append(line)
        self.console.file.write("\n".join(lines) + "\n")

    def finish(self, summary: Summary) -> None:
        self.console.print()
        render_summary(summary, self.console)
        super().finish(summary)
