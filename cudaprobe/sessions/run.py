"""The lifetime of a probe session: the one lifecycle trace, stats, memory and
serve run in.

Entering forks `-- COMMAND` held before exec, catches the stop signals
(SIGINT, SIGTERM and SIGHUP alike), compiles and attaches, and puts the
command's pid in the filter map; with Targets (--pid, --comm, -- COMMAND), a
Follower adds their pids and probes the CUDA code they load later. The clock
starts (t0_ns: --duration and the calls' timestamps count from there),
`on_attached` readies the caller (trace starts its reporter), and the command
is let run, or never run if a stop signal came while attaching.

`running()` says whether to go on: not after a stop signal, --duration, the
command's exit, or the exit of every --pid. `finish(read)` ends it: after a
stop signal a running command gets COMMAND_GRACE_S to exit too (Ctrl-C at a
terminal reaches it as well) while its calls are read; the probes are
detached, so that the drain that follows leaves nothing unread. The caller
then reports; leaving the `with` closes the BPF object. The stop signals stay
caught until then, so a second Ctrl-C during teardown is ignored.
`exit_status()` says what became of the command, which is never killed.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from cudaprobe.analysis.summary import Summary
from cudaprobe.probe.bpfprog import Settings
from cudaprobe.probe.plan import ProbePlan
from cudaprobe.probe.tracer import Tracer
from cudaprobe.sessions.follow import Follower
from cudaprobe.sessions.signals import StopRequest
from cudaprobe.targets.launch import LaunchedCommand
from cudaprobe.targets.selection import Targets

POLL_MS = 100  # how long a read waits for events: also how often the stop conditions are checked
STEP_S = 0.1  # how often running() is checked while sleeping
COMMAND_GRACE_S = 0.3  # after a stop signal, for the command to exit too (Ctrl-C)
GRACE_POLL_MS = 20  # reads during the grace period: short, to see the command's exit soon


def say_on_stderr(message: str) -> None:
    print(f"cudaprobe: {message}", file=sys.stderr)


@dataclass
class RunOptions:
    """What every probing command says about its run (each command's options extend it)."""
    command: list[str] = field(default_factory=list)  # -- COMMAND, started held
    command_env: dict[str, str] = field(default_factory=dict)  # added to its environment
    duration: float | None = None
    targets: Targets | None = None  # processes followed (--pid, --comm, -- COMMAND)
    notify: Callable[[str], None] = say_on_stderr  # what happens to them, said to the user
    # given the running processes traced (--pid, --comm) once the probes are in
    # (--gpu-time's injection)
    on_probes_in: Callable[[list[int]], None] | None = None


def say_if_no_cuda(options: RunOptions, calls: int) -> None:
    """-- COMMAND ran and made none of the traced calls: say whether it loaded
    CUDA at all (what the follow machinery saw in its maps, and what its
    executable links), rather than leave an empty summary to be puzzled over."""
    if not options.command or calls or options.targets is None:
        return
    name = options.command[0]
    seen = sorted(options.targets.cuda_seen)
    if seen:
        options.notify(f"{name} made none of the traced calls, though it maps "
                       f"{', '.join(seen)} (-e chooses them: see `cudaprobe list`)")
    elif not options.targets.discover:  # --lib: its maps were not looked at
        options.notify(f"{name} made none of the traced calls")
    else:
        options.notify(f"{name} made no CUDA call and mapped no CUDA library (no libcudart, "
                       "libcuda, or CUDA code of its own)")


# reads what the probes sent within timeout_ms; 0: everything left (after detach)
Read = Callable[[int], None]


class ProbeRun:
    def __init__(self, plan: ProbePlan, settings: Settings, options: RunOptions,
                 probed: Summary | None = None,
                 on_attached: Callable[[ProbeRun], None] | None = None) -> None:
        self.plan = plan
        self.settings = settings
        self.options = options
        self.notify = options.notify
        # the libraries probed, those found later too (the Follower keeps it up to date)
        if probed is None:
            probed = Summary(libraries=sorted({a.path for a in plan.attachments}),
                             not_found=plan.not_found)
        self.probed = probed
        self._on_attached = on_attached
        self._follower: Follower | None = None
        self._all_exited = False
        self.command: LaunchedCommand | None = None
        self.tracer: Tracer
        self.t0_ns = 0
        self._stop = StopRequest()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> ProbeRun:
        try:
            self.command = (LaunchedCommand(self.options.command, self.options.command_env)
                            if self.options.command else None)
            self._stack.enter_context(self._stop)
            self.tracer = self._stack.enter_context(Tracer(self.plan, self.settings))
            if self.tracer.py is not None:
                self.tracer.py.notify = self.notify
                if self.command:
                    self.tracer.py.add_command(self.command.argv)
            if self.command:
                self.tracer.attacher.add_target(self.command.pid)
            self.t0_ns = time.monotonic_ns()
            if self.options.targets is not None:
                self._follower = Follower(self.options.targets, self.tracer.attacher, self.plan,
                                          self.probed, self.notify)
            # every probe in: each function traced from this instant (the Follower
            # starts it already, before it says it is attached)
            self.tracer.attacher.start()
            if self.options.on_probes_in is not None and self.command is None:
                self.options.on_probes_in(self.tracer.attacher.target_pids())
            if self._on_attached is not None:
                self._on_attached(self)
        except BaseException:
            self._close()
            raise
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
        return (time.monotonic_ns() - self.t0_ns) / 1e9

    def running(self) -> bool:
        if self._stop.requested or self._all_exited:
            return False
        if self.command is not None and self.command.wait() is not None:
            return False
        if self._follower is not None and self._follower.step():
            self.notify("every traced pid has exited: stopping")
            self._all_exited = True
            return False
        duration = self.options.duration
        return not (duration and self.elapsed_s >= duration)

    def sleep(self, seconds: float) -> None:
        """Sleep up to `seconds`, waking early once running() turns false."""
        end = time.monotonic() + seconds
        while self.running() and (left := end - time.monotonic()) > 0:
            time.sleep(min(STEP_S, left))

    def finish(self, read: Read | None = None) -> None:
        """After the loop: a command still running after a stop signal gets
        COMMAND_GRACE_S to exit too (its calls are read meanwhile); then the
        probes are detached and what they sent is drained with read(0). The
        maps stay readable until the `with` ends."""
        command = self.command
        if command is not None and command.released and self._stop.requested:
            deadline = time.monotonic() + COMMAND_GRACE_S
            while command.wait() is None and time.monotonic() < deadline:
                if read is None:
                    time.sleep(GRACE_POLL_MS / 1000)
                else:
                    read(GRACE_POLL_MS)
        self.tracer.attacher.detach()
        if read is not None:
            read(0)

    def wait_untraced(self) -> None:
        """Tracing stopped early (its output failed) with the probes detached: wait
        for a running -- COMMAND to exit, or for a stop signal, so that
        exit_status() has its status to give."""
        command = self.command
        while (command is not None and command.released and not self._stop.requested
               and command.wait() is None):
            time.sleep(STEP_S)

    def exit_status(self) -> int:
        """The command's exit status, or 0 without one (command_exit_status)."""
        if self.command is None:
            return 0
        return command_exit_status(self.command, self._stop.signal, self.notify)


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
