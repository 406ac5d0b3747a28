"""A trace session: attach, stream decoded calls to a reporter, stop, summarize.

Stop conditions: a stop signal, --duration elapsed, the launched command
exiting, or every --pid target exiting. While tracing processes (--pid,
--comm, -- COMMAND), a Follower attaches the CUDA objects they load.
Teardown detaches the probes, drains the ring buffer, reports calls still in
flight and prints the summary, in that order; stop signals that arrive
meanwhile are ignored. A launched command is never killed: if tracing stops
first, it keeps running and cudaprobe says so.
"""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from rich.console import Console

from cudaprobe import STARTED
from cudaprobe.analysis.summary import Summary, count_lost, describe_lost
from cudaprobe.decode.calls import Call, Symbolizer, decode_event
from cudaprobe.decode.handles import KernelHandles
from cudaprobe.decode.records import RecordDecoder
from cudaprobe.output.formats import Reporter
from cudaprobe.probe.bpfprog import Settings
from cudaprobe.probe.event import RawEvent
from cudaprobe.probe.plan import ProbePlan
from cudaprobe.probe.sweep import Sweeper
from cudaprobe.probe.tracer import Tracer
from cudaprobe.sessions.follow import Follower
from cudaprobe.sessions.signals import StopRequest
from cudaprobe.targets.launch import LaunchedCommand
from cudaprobe.targets.selection import Targets

POLL_MS = 100
LOSS_REPORT_S = 1.0
COMMAND_GRACE_S = 0.3  # after a stop signal, for the command to exit too (Ctrl-C)


@dataclass
class SessionOptions:
    duration: float | None = None
    command: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    symbolize: Symbolizer | None = None
    # called with each event's pid before it is decoded: a symbolizer that reads
    # /proc/PID/maps wants to see the process while it still runs
    see_process: Callable[[int], None] | None = None
    # processes to follow (--pid, --comm, -- COMMAND), and where to say what happens to them
    targets: Targets | None = None
    notify: Callable[[str], None] = lambda message: print(f"cudaprobe: {message}",
                                                          file=sys.stderr)
    # given the loss counters (tracer's and decode_errors), cumulative, each second
    on_counters: Callable[[dict[str, int]], None] | None = None


class TraceSession:
    def __init__(self, plan: ProbePlan, settings: Settings, reporter: Reporter,
                 summary_console: Console | None, options: SessionOptions) -> None:
        self.plan = plan
        self.settings = settings
        self.reporter = reporter
        # where the human summary goes when the reporter itself does not show it
        self.summary_console = summary_console
        self.options = options
        self.summary = Summary(libraries=sorted({a.path for a in plan.attachments}),
                               not_found=plan.not_found)
        self._in_flight_errors = 0
        self._records: RecordDecoder | None = None  # made once t0 is known
        # a reporter that writes straight from records (JsonlReporter), summary included
        self._write_records = getattr(reporter, "write_records", None)
        self.kernel_handles = KernelHandles()  # driver launches' kernel names, as made
        self.sweeper = Sweeper()
        self._t0 = 0
        self._lost_said = 0
        self._next_loss_check = 0.0

    @property
    def decode_errors(self) -> int:
        return self._in_flight_errors + (self._records.errors if self._records else 0)

    def _in_flight(self, raws: list[RawEvent]) -> list[Call]:
        calls = []
        for raw in raws:
            if self.options.see_process is not None:
                self.options.see_process(raw.pid)
            try:
                calls.append(decode_event(raw, self.plan.probes, self._t0,
                                          self.options.symbolize, in_flight=True,
                                          handles=self.kernel_handles))
            except ValueError:
                self._in_flight_errors += 1
        return calls

    def _emit(self, records: list[tuple]) -> None:
        if self._write_records is not None:  # the reporter formats the records itself
            self._write_records(self._records, records, self.summary)
            return
        calls = self._records.calls(records)
        if calls:
            self.summary.add(calls)
            self.reporter.calls(calls)

    def run(self) -> int:
        """Trace until stopped; returns the exit status for cudaprobe."""
        command = LaunchedCommand(self.options.command) if self.options.command else None
        started = time.monotonic()
        try:
            with StopRequest() as stop, Tracer(self.plan, self.settings) as tracer:
                for pid in self.options.pids + ([command.pid] if command else []):
                    tracer.add_target(pid)
                self._t0 = time.monotonic_ns()
                self._records = RecordDecoder(self.plan.probes, self._t0, self.options.symbolize,
                                              self.kernel_handles, self.options.see_process)
                self.summary.attach_s = tracer.attach_seconds
                self.summary.startup_s = time.monotonic() - STARTED
                follower = None
                if self.options.targets is not None:
                    follower = Follower(self.options.targets, tracer, self.plan, self.summary,
                                        self.options.notify)
                self.reporter.start()
                if command and stop.requested:  # stopped while attaching: never run it
                    command.abandon()
                elif command:
                    command.release()
                deadline = started + self.options.duration if self.options.duration else None
                while not stop.requested:
                    self._emit(tracer.poll_records(POLL_MS))
                    self._say_losses(tracer)
                    self.sweeper.due(tracer)
                    if command and command.wait() is not None:
                        break
                    if follower and follower.step():
                        self.options.notify("every traced pid has exited: stopping")
                        break
                    if deadline and time.monotonic() >= deadline:
                        break
                if command and stop.requested:
                    self._await_command(tracer, command)
                tracer.detach()  # first, so that the drain below leaves nothing unread
                self._finish(tracer, started)
        except BaseException:
            if command and command.exit_status is None and command._release_fd >= 0:
                command.abandon()
            raise
        return command_exit_status(command, stop.signal, self.options.notify) if command else 0

    def _await_command(self, tracer: Tracer, command: LaunchedCommand) -> None:
        """Ctrl-C reaches the command too: trace its last calls while it exits."""
        deadline = time.monotonic() + COMMAND_GRACE_S
        while command.wait() is None and time.monotonic() < deadline:
            self._emit(tracer.poll_records(20))

    def _say_losses(self, tracer: Tracer) -> None:
        """The live status line: on stderr, at most each second, when more was lost."""
        now = time.monotonic()
        if now < self._next_loss_check:
            return
        self._next_loss_check = now + LOSS_REPORT_S
        lost = {**tracer.counters(), "decode_errors": self.decode_errors}
        if self.options.on_counters is not None:
            self.options.on_counters(lost)
        total = count_lost(lost)
        if total > self._lost_said:
            self._lost_said = total
            self.options.notify(f"{total} events lost so far ({describe_lost(lost)})")

    def _finish(self, tracer: Tracer, started: float) -> None:
        self._emit(tracer.drain_records())
        self.sweeper.now(tracer)  # calls of threads gone are not "still running"
        self.summary.exited_mid_call = self.sweeper.removed
        in_flight = self._in_flight(tracer.in_flight())
        in_flight.sort(key=lambda c: c.ts_ns)
        self.summary.in_flight = in_flight
        if in_flight:
            self.reporter.calls(in_flight)
        # calls, errors and latency as the kernel counted them: exact when rows were lost
        self.summary.take_kernel_counts(self.plan.probes, tracer.read_tally())
        lost = tracer.counters()
        lost["decode_errors"] = self.decode_errors
        self.summary.lost = lost
        self.summary.duration_s = time.monotonic() - started
        self.reporter.finish(self.summary)
        if self.summary_console is not None:
            self.summary.render(self.summary_console)


def command_exit_status(command: LaunchedCommand, signum: int | None,
                        notify: Callable[[str], None]) -> int:
    """The command's exit status; if tracing stopped first, say what became
    of it and return 128+N for stop signal N (124 for --duration, as timeout(1))."""
    status = command.wait()
    name = command.argv[0]
    why = f"stopped by {signal.Signals(signum).name}" if signum else "--duration is over"
    if not command.released:
        notify(f"{why} before {name} was started: it did not run")
    elif status is None:
        notify(f"{why}: {name} (pid {command.pid}) keeps running, no longer traced")
    else:
        return status
    return 128 + signum if signum else 124
