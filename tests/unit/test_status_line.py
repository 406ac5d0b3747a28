"""The status line: drawn by rich's Live on a terminal while the rows go to a
file or pipe, with time, calls/s, rows written, lost and how to stop; messages
printed above it; gone at the end; off when stderr is not a terminal."""

from __future__ import annotations

import io

from rich.console import Console
from rich.text import Text

from cudaprobe.output import status as status_module
from cudaprobe.output.status import StatusLine, wanted


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_only_with_rows_to_a_file_or_pipe_and_a_terminal_for_it():
    assert wanted(False, Tty())
    assert not wanted(True, Tty())  # the table on the terminal: the rows say it
    assert not wanted(False, io.StringIO())  # stderr to a file or pipe
    assert not wanted(False, None)


def test_the_line_says_time_rate_rows_lost_and_how_to_stop(monkeypatch):
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120, color_system=None)
    clock = [100.0]
    monkeypatch.setattr(status_module.time, "monotonic", lambda: clock[0])
    line = StatusLine(console, "calls.jsonl")
    say = line.say_through(lambda m: buf.write(f"BEFORE {m}\n"))
    say("said before")
    line.start()
    clock[0] = 102.0
    line.update(12.4, 5000, 3)
    say("said meanwhile")
    line.stop()
    say("said after")
    text = Text.from_ansi(buf.getvalue()).plain
    assert "BEFORE said before" in text and "BEFORE said after" in text
    assert "cudaprobe: said meanwhile" in text  # through the live console, above the line
    assert ("cudaprobe: 12s, 2,500 calls/s, 5,000 rows written to calls.jsonl, 3 lost. "
            "Ctrl-C to stop") in text
    assert "\x1b[2K" in buf.getvalue()  # redrawn in place, and cleared (transient)
    line.update(13.0, 6000, 3)  # stopped: nothing more drawn
    assert Text.from_ansi(buf.getvalue()).plain == text
