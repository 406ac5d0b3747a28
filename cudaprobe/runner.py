"""The lifetime of a probe session, for commands that read the BPF maps or
events on their own schedule (stats, memory).

Entering starts `-- COMMAND` held before exec, compiles and attaches, puts the
command's pid (and any others) in the filter map, then lets the command run.
`running()` says whether to go on: not after a stop signal (SIGINT, SIGTERM
and SIGHUP alike), --duration, or the command's exit. Leaving detaches, with
the stop signals still caught, so a second Ctrl-C during teardown is ignored.
"""

from __future__ import annotations

import contextlib
import time

from .bpfprog import Settings
from .launch import LaunchedCommand
from .probes import ProbePlan
from .signals import StopRequest
from .tracer import Tracer

STEP_S = 0.1  # how often running() is checked while sleeping


class ProbeRun:
    def __init__(self, plan: ProbePlan, settings: Settings, command: list[str] | None = None,
                 pids: list[int] | None = None, duration: float | None = None) -> None:
        self.plan = plan
        self.settings = settings
        self.argv = list(command or [])
        self.pids = list(pids or [])
        self.duration = duration
        self.command: LaunchedCommand | None = None
        self._released = False
        self.tracer: Tracer
        self.started = 0.0
        self._stop = StopRequest()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> ProbeRun:
        try:
            self.command = LaunchedCommand(self.argv) if self.argv else None
            self._stack.enter_context(self._stop)
            self.tracer = self._stack.enter_context(Tracer(self.plan, self.settings))
            for pid in self.pids + ([self.command.pid] if self.command else []):
                self.tracer.add_target(pid)
        except BaseException:
            self._close()
            raise
        self.started = time.monotonic()
        if self.command:
            self.command.release()
            self._released = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        self._stack.close()
        if self.command is not None and not self._released:
            self.command.abandon()  # attach failed: the child exits without running

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def running(self) -> bool:
        if self._stop.requested:
            return False
        if self.command is not None and self.command.wait() is not None:
            return False
        return not (self.duration and self.elapsed_s >= self.duration)

    def sleep(self, seconds: float) -> None:
        """Sleep up to `seconds`, waking early once running() turns false."""
        end = time.monotonic() + seconds
        while self.running() and (left := end - time.monotonic()) > 0:
            time.sleep(min(STEP_S, left))

    def exit_status(self, grace_s: float = 1.0) -> int:
        """The command's exit status, or 0 without one. If we stopped first, it gets
        a moment to finish (Ctrl-C reaches it too); else 130, and it keeps running."""
        if self.command is None:
            return 0
        deadline = time.monotonic() + grace_s
        while (status := self.command.wait()) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return 130 if status is None else status
