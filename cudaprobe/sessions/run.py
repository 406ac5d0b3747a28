"""The lifetime of a probe session, for commands that read the BPF maps or
events on their own schedule (stats, memory).

Entering starts `-- COMMAND` held before exec, compiles and attaches, puts the
command's pid in the filter map, then lets the command run. With Targets
(--pid, --comm, -- COMMAND), trace's Follower adds their pids and probes the
CUDA code they load later. `running()` says whether to go on: not after a
stop signal (SIGINT, SIGTERM and SIGHUP alike), --duration, the command's
exit, or the exit of every --pid. Teardown is trace's (session.py): after a
stop signal a running command gets COMMAND_GRACE_S to exit too, `finish()`
detaches so that a last read leaves nothing unread, and the exit status says
what became of the command; the stop signals stay caught until the end, so a
second Ctrl-C during teardown is ignored.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

from cudaprobe.analysis.summary import Summary
from cudaprobe.probe.bpfprog import Settings
from cudaprobe.probe.event import RawEvent
from cudaprobe.probe.plan import ProbePlan
from cudaprobe.probe.tracer import Tracer
from cudaprobe.sessions.follow import Follower
from cudaprobe.sessions.signals import StopRequest
from cudaprobe.sessions.trace import COMMAND_GRACE_S, command_exit_status
from cudaprobe.targets.launch import LaunchedCommand
from cudaprobe.targets.selection import Targets

STEP_S = 0.1  # how often running() is checked while sleeping


class ProbeRun:
    def __init__(self, plan: ProbePlan, settings: Settings, command: list[str] | None = None,
                 duration: float | None = None, targets: Targets | None = None,
                 notify: Callable[[str], None] = print) -> None:
        self.plan = plan
        self.settings = settings
        self.argv = list(command or [])
        self.duration = duration
        self.targets = targets
        self.notify = notify
        # the libraries probed, those found later too (the Follower keeps it up to date)
        self.probed = Summary(libraries=sorted({a.path for a in plan.attachments}),
                              not_found=plan.not_found)
        self._follower: Follower | None = None
        self._all_exited = False
        self.command: LaunchedCommand | None = None
        self.tracer: Tracer
        self.started = 0.0
        self._stop = StopRequest()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> ProbeRun:
        try:
            self.command = LaunchedCommand(self.argv) if self.argv else None
            self._stack.enter_context(self._stop)
            self.tracer = self._stack.enter_context(Tracer(self.plan, self.settings))
            if self.command:
                self.tracer.add_target(self.command.pid)
            if self.targets is not None:
                self._follower = Follower(self.targets, self.tracer, self.plan, self.probed,
                                          self.notify)
        except BaseException:
            self._close()
            raise
        self.started = time.monotonic()
        if self.command and self._stop.requested:  # stopped while attaching: never run it
            self.command.abandon()
        elif self.command:
            self.command.release()
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        self._stack.close()
        if self.command is not None and not self.command.released:
            self.command.abandon()  # attach failed: the child exits without running

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def running(self) -> bool:
        if self._stop.requested or self._all_exited:
            return False
        if self.command is not None and self.command.wait() is not None:
            return False
        if self._follower is not None and self._follower.step():
            self.notify("every traced pid has exited: stopping")
            self._all_exited = True
            return False
        return not (self.duration and self.elapsed_s >= self.duration)

    def sleep(self, seconds: float) -> None:
        """Sleep up to `seconds`, waking early once running() turns false."""
        end = time.monotonic() + seconds
        while self.running() and (left := end - time.monotonic()) > 0:
            time.sleep(min(STEP_S, left))

    def finish(self, on_events: Callable[[list[RawEvent]], None] | None = None) -> None:
        """After the loop: a command still running after a stop signal gets
        COMMAND_GRACE_S to exit too (its calls go to `on_events` meanwhile); then
        the probes are detached. The maps and the ring buffer stay readable."""
        command = self.command
        if command is not None and command.released and self._stop.requested:
            deadline = time.monotonic() + COMMAND_GRACE_S
            while command.wait() is None and time.monotonic() < deadline:
                if on_events is None:
                    time.sleep(0.02)
                else:
                    on_events(self.tracer.poll(20))
        self.tracer.detach()

    def exit_status(self) -> int:
        """The command's exit status, or 0 without one (session.command_exit_status)."""
        if self.command is None:
            return 0
        return command_exit_status(self.command, self._stop.signal, self.notify)
