"""The live table: rows streamed as calls complete, as fixed-width text under
one header, so every batch lines up; rich renders the header and summary."""

from __future__ import annotations

import errno
import os
from typing import TextIO

from rich.console import Console
from rich.text import Text

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call, humanize_ns
from cudaprobe.decode.gputime import gpu_span_ns
from cudaprobe.output.base import Reporter


def _cell(value: str, width: int | None, justify: str) -> str:
    if width is None:
        return value
    value = _fit(value, width)
    return value.rjust(width) if justify == "right" else value.ljust(width)


COLUMNS = (  # name, width, justify
    ("TIME(ms)", 10, "right"),
    ("PROCESS", 15, "left"),
    ("PID", 7, "right"),
    ("TID", 7, "right"),
    ("EVENT", 26, "left"),
    ("LATENCY", 9, "right"),
    ("RESULT", 28, "left"),
    ("DETAILS", None, "left"),
)
GPU_COLUMN = ("GPU TIME", 9, "right")  # --gpu-time: before DETAILS


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


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class TableReporter(Reporter):
    """Rows are formatted as plain fixed-width text (rich renders only the
    header and the summary): a rich Table per batch cost ~100 µs a row, which
    could not keep up with the ring buffer."""

    name = "table"
    extensions = (".txt", ".log", ".table")

    def __init__(self, stream: TextIO, console: Console | None = None) -> None:
        super().__init__(stream)
        self.console = console or make_console(stream)
        self._color = self.console.is_terminal and not self.console.no_color

    def _columns(self) -> tuple[tuple[str, int | None, str], ...]:
        return COLUMNS[:-1] + (GPU_COLUMN, COLUMNS[-1]) if self.gpu_time else COLUMNS

    def start(self) -> None:
        header = " ".join(_cell(name, width, justify) for name, width, justify in self._columns())
        self.console.print(Text(header.rstrip(), style="bold"))

    def calls(self, calls: list[Call]) -> None:
        if not calls:
            return
        lines = []
        columns = self._columns()
        for c in calls:
            if c.in_flight:
                latency, result = "-", "in flight"
            else:
                latency, result = humanize_ns(c.duration_ns), c.ret_name or ""
            cells = (f"{c.time_ms:.3f}", c.process, str(c.pid), str(c.tid), c.event, latency,
                     result)
            if self.gpu_time:
                cells += ("-" if c.gpu is None else humanize_ns(gpu_span_ns(c.gpu)),)
            row = " ".join(_cell(v, w, j) for (_n, w, j), v in zip(columns, cells))
            line = f"{row} {c.details}"
            if self._color and (c.ret or c.in_flight):
                line = f"\x1b[{33 if c.in_flight else 31}m{line}\x1b[0m"
            lines.append(line)
        self.console.file.write("\n".join(lines) + "\n")

    def finish(self, summary: Summary) -> None:
        self.console.print()
        summary.render(self.console)
        super().finish(summary)
