"""`cudaprobe trace` put together from its options: the output stream, the
status line, the reporter and the sinks beside it, where the human summary
goes, kernel names; then the session, and the exit status (--strict)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

from cudaprobe.decode.symbolize import KernelSymbolizer
from cudaprobe.output.capped import SizeCapped
from cudaprobe.output.files import DEFAULT_MODE, StdoutStream, open_output
from cudaprobe.output.formats import REPORTERS
from cudaprobe.output.otlp_model import OtlpConfig
from cudaprobe.output.otlp_sinks import with_otlp
from cudaprobe.output.status import StatusLine
from cudaprobe.output.status import wanted as status_line_wanted
from cudaprobe.output.table import make_console
from cudaprobe.output.text import json_escape, terminal_lines
from cudaprobe.sessions.probing import Probing
from cudaprobe.sessions.trace import SessionOptions, TraceSession

STRICT_EXIT = 3  # --strict and events were lost


@dataclass(frozen=True)
class TraceRequest:
    """What trace's own options say: the format and where the rows go, the caps
    on them, --strict, --gpu-time and --otlp."""
    fmt: str
    output: str | None = None
    force: bool = False
    mode: int | None = None
    max_size: int | None = None
    strict: bool = False
    gpu_time: bool = False
    otlp: OtlpConfig | None = None


def terminal_view(fmt: str) -> Callable[[str], str]:
    """How rows of `fmt` are shown on a terminal: names a traced process chose,
    escaped (JSON's way in JSON, still the same data; strace's in CSV)."""
    if fmt == "csv":
        return terminal_lines
    return lambda text: terminal_lines(text, json_escape)


def run_trace(probing: Probing, request: TraceRequest) -> int:
    """Trace until stopped; returns the exit status for cudaprobe."""
    output = request.output
    # no -o with -- COMMAND: stderr, as strace writes its trace (the command keeps stdout)
    stream = open_output(output, request.force, request.mode or DEFAULT_MODE,
                         command=bool(probing.request.command))
    notify = probing.begin("tracing")
    if request.fmt != "table" and stream.isatty():
        stream.shown = terminal_view(request.fmt)
    status_line = None
    if status_line_wanted(stream.isatty(), sys.stderr):
        status_line = StatusLine(make_console(sys.stderr),
                                 output if output and output != "-" else stream.name)
        notify = status_line.say_through(notify)
    reporter = REPORTERS[request.fmt](stream, gpu_time=request.gpu_time,
                                      py_stacks=probing.settings.py_stacks)
    if request.max_size:
        reporter = SizeCapped(reporter, stream, request.max_size, notify)
    reporter, on_counters = with_otlp(reporter, request.otlp, notify)
    # the table shows its own summary; other formats get the human one on stderr
    err = make_console(sys.stderr)
    summary_console = None if request.fmt == "table" else err
    if request.fmt == "table" and not isinstance(stream, StdoutStream):  # StderrStream is one
        summary_console = err
    command = list(probing.request.command)
    kernels = KernelSymbolizer.for_session(command, [a.file for a in probing.plan.attachments])
    session = TraceSession(probing.plan, probing.settings, reporter, summary_console,
                           SessionOptions(duration=probing.request.duration, command=command,
                                          symbolize=kernels, see_process=kernels.see,
                                          targets=probing.targets, notify=notify,
                                          on_counters=on_counters, output=stream,
                                          gpu_time=request.gpu_time, status=status_line,
                                          hold_end=request.fmt == "table" and stream.isatty()
                                          and sys.stderr.isatty()))
    try:
        status = session.run()
    finally:
        stream.close()
    # spans --otlp did not deliver are not calls lost, but --strict counts them
    lost = session.summary.total_lost + sum(session.summary.undelivered.values())
    if request.strict and lost:
        notify(f"{lost} events lost: exit {STRICT_EXIT} (--strict)")
        return STRICT_EXIT
    return status
