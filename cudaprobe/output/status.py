"""The status line: while the rows go to a file or a pipe, one line on the
terminal (stderr, when it is one) says how the trace goes: time, calls a
second, rows written, lost, and how to stop it. rich's Live draws it (and
takes it away at the end); messages said meanwhile are printed above it."""

from __future__ import annotations

import time
from typing import Callable, TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from cudaprobe.output.text import escape

REFRESH_PER_SECOND = 4


def wanted(output_is_terminal: bool, stderr: TextIO | None) -> bool:
    """A status line goes with rows written to a file or a pipe, on a terminal."""
    return not output_is_terminal and stderr is not None and stderr.isatty()


class StatusLine:
    def __init__(self, console: Console, target: str) -> None:
        self.console = console
        self.target = target  # where the rows go, as said: "calls.jsonl", "the pipe"
        self._live: Live | None = None
        self._last = (0.0, 0)  # (monotonic s, rows) of the previous update: calls/s
        self._rate = 0.0

    def start(self) -> None:
        self._live = Live(self._text(0.0, 0, 0), console=self.console, transient=True,
                          refresh_per_second=REFRESH_PER_SECOND, redirect_stdout=False,
                          redirect_stderr=False)
        self._live.start()
        self._last = (time.monotonic(), 0)

    def update(self, elapsed_s: float, rows: int, lost: int) -> None:
        if self._live is None:
            return
        now = time.monotonic()
        then, rows_then = self._last
        if now - then >= 1.0:  # the rate over the last second or so
            self._rate = (rows - rows_then) / (now - then)
            self._last = (now, rows)
        self._live.update(self._text(elapsed_s, rows, lost))

    def _text(self, elapsed_s: float, rows: int, lost: int) -> Text:
        text = Text(f"cudaprobe: {elapsed_s:.0f}s, {self._rate:,.0f} calls/s, {rows:,} rows "
                    f"written to {escape(self.target)}, ", style="dim")
        text.append(f"{lost:,} lost", style="bold red" if lost else "dim")
        text.append(". Ctrl-C to stop", style="dim")
        return text

    def draining(self, rows: int, calls: int | None) -> None:
        """The trace has ended and the rows captured are still being written:
        how far that is, of the calls the kernel counted (None: not comparable,
        --errors-only keeps some of them)."""
        if self._live is None:
            return
        text = Text(f"cudaprobe: writing {escape(self.target)}: {rows:,} rows", style="dim")
        if calls:
            text.append(f" of {calls:,} calls ({min(100, 100 * rows // calls)}%)", style="dim")
        text.append("; Ctrl-C stops it, the rest counted as lost", style="dim")
        self._live.update(text, refresh=True)  # (a batch at a time: tens of ms)

    def say_through(self, notify: Callable[[str], None]) -> Callable[[str], None]:
        """`notify`, printing above the line while it is shown."""
        def say(message: str) -> None:
            if self._live is None:
                notify(message)
            else:
                self._live.console.print(Text(f"cudaprobe: {escape(message)}", style="dim"))
        return say

    def stop(self) -> None:
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()
