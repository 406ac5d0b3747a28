"""Where the report of stats and memory goes (report_output), and its writing
at the end of a run, a failure of which is said in one line (write_report)."""

from __future__ import annotations

import errno
import os
import sys
from typing import Callable

import click
from rich.console import Console

from cudaprobe.errors import OutputFailed, UsageError
from cudaprobe.output.files import OutputStream, StdoutStream, open_output, stdout_closed
from cudaprobe.output.formats import REPORT_EXTENSIONS, format_of_output
from cudaprobe.output.table import make_console
from cudaprobe.output.text import escape


def report_output(output: str | None, force: bool, fmt: str | None,
                  as_json: bool, command: bool = False) -> tuple[OutputStream, bool, Console]:
    """Where a report goes: the -o stream (stdout without it), whether it is JSON
    (-f json, --json, or -o FILE.json), and the console for the human report:
    stdout, unless the JSON goes there. JSON for stdout with a -- COMMAND and
    no -o is refused: the command writes there too, and `| jq` would read both."""
    if as_json and fmt not in (None, "json"):
        raise UsageError(f"--json and -f {fmt} disagree: give one (--json is -f json)")
    as_json = format_of_output("json" if as_json else fmt, output, REPORT_EXTENSIONS) == "json"
    if as_json and command and output is None:
        raise UsageError("the JSON report would share stdout with the command's own output",
                         fix="give -o FILE for the report, or -o - to share stdout all the same")
    stream = open_output(output, force)
    return stream, as_json, make_console(
        sys.stderr if as_json and isinstance(stream, StdoutStream) else sys.stdout)


def write_report(write: Callable[[], None], status: int, command: bool) -> int:
    """Write the report at the end of a run (`write`), and return the exit status:
    `status`, unless the write failed (disk full, EIO, stdout closed or its reader
    gone). Then one line says so (none for EPIPE, a reader that has seen enough)
    and the status is -- COMMAND's all the same, or 1 without one (0 for EPIPE)."""
    try:
        write()
        if stdout_closed():  # started with stdout closed: the human report went nowhere
            raise OutputFailed("writing stdout failed: stdout is closed", errno.EBADF)
        sys.stdout.flush()
    except OutputFailed as e:
        failure, message = e.errno, str(e)
    except OSError as e:
        if e.filename is not None:  # not a write: open() and the like name their file
            raise
        failure, message = e.errno, f"writing output failed: {e.strerror}"
    else:
        return status
    if not stdout_closed():  # the interpreter's last flush: quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    if failure != errno.EPIPE:
        click.echo(f"cudaprobe: {escape(message)}", err=True)
    if command:
        return status
    return 0 if failure == errno.EPIPE else OutputFailed.exit_code
