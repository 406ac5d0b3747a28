"""The live table: rows streamed as calls complete, one rich table per batch
with fixed column widths so batches line up under one header."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..decode import Call, humanize_ns
from ..summary import Summary
from .base import Reporter

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


def make_console(stream: TextIO) -> Console:
    """A console that keeps rows on one line when writing to a file or pipe."""
    tty = stream.isatty() if hasattr(stream, "isatty") else False
    return Console(file=stream, width=None if tty else 240, highlight=False,
                   soft_wrap=False, force_terminal=tty or None)


class TableReporter(Reporter):
    name = "table"
    extensions = (".txt", ".log", ".table")

    def __init__(self, stream: TextIO, console: Console | None = None) -> None:
        super().__init__(stream)
        self.console = console or make_console(stream)
        self._header_shown = False

    def _table(self) -> Table:
        table = Table(box=None, show_header=not self._header_shown, pad_edge=False,
                      header_style="bold", expand=False)
        for name, width, justify in COLUMNS:
            table.add_column(name, width=width, justify=justify, no_wrap=width is not None,
                             overflow="ellipsis" if width else "fold")
        self._header_shown = True
        return table

    def start(self) -> None:
        self.console.print(self._table())

    def calls(self, calls: list[Call]) -> None:
        if not calls:
            return
        table = self._table()
        for c in calls:
            if c.in_flight:
                latency, result, style = "-", "in flight", "yellow"
            else:
                latency, result = humanize_ns(c.duration_ns), c.ret_name or ""
                style = "red" if c.ret else ""
            table.add_row(f"{c.time_ms:.3f}", Text(c.process), str(c.pid), str(c.tid),
                          Text(c.event), latency, Text(result, style=style), Text(c.details))
        self.console.print(table)

    def finish(self, summary: Summary) -> None:
        self.console.print()
        summary.render(self.console)
        super().finish(summary)
