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
exit of the command and of every process it started (its descendants, which
the BPF fork hook adds to the targets: as `strace -f`, the trace goes on
while any of them runs), or the exit of every --pid. `finish(read)` ends it:
after a stop signal a running command gets COMMAND_GRACE_S to exit too
(Ctrl-C at a terminal reaches it as well) while its calls are read; then
what ended the trace is said, once, and the exit status decided, before the
drain (a command that exits during a long drain did not end the trace); the
probes are detached, so that the drain that follows leaves nothing unread.
A second stop signal cuts the drain short (`drain_cut`): the caller writes
what it decoded and counts the rest as lost. The caller then reports;
leaving the `with` closes the BPF object. The stop signals stay caught until
then, so further signals during teardown are ignored. `exit_status()` says
what became of the command, which is never killed.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from cudaprobe.analysis.summary import Summary
from cudaprobe.output.text import escape
from cudaprobe.probe.bpfprog import Settings
from cudaprobe.probe.plan import ProbePlan
from cudaprobe.probe.tracer import Tracer
from cudaprobe.sessions.follow import Follower
from cudaprobe.sessions.signals import StopRequest
from cudaprobe.targets.launch import LaunchedCommand
from cudaprobe.targets.procmaps import process_running
from cudaprobe.targets.selection import Targets

if TYPE_CHECKING:  # (sessions/gputime_attach.py imports bcc's users: only its type here)
    from cudaprobe.sessions.gputime_attach import GpuTimeAttach

POLL_MS = 100  # how long a read waits for events: also how often the stop conditions are checked
STEP_S = 0.1  # how often running() is checked while sleeping
COMMAND_GRACE_S = 0.3  # after a stop signal, for the command to exit too (Ctrl-C)
GRACE_POLL_MS = 20  # reads during the grace period: short, to see the command's exit soon


def say_on_stderr(message: str) -> None:
    print(f"cudaprobe: {escape(message)}", file=sys.stderr)


@dataclass
class RunOptions:
    """What every probing command says about its run (each command's options extend it)."""
    command: list[str] = field(default_factory=list)  # -- COMMAND, started held
    command_env: dict[str, str] = field(default_factory=dict)  # added to its environment
    duration: float | None = None
    targets: Targets | None = None  # processes followed (--pid, --comm, -- COMMAND)
    notify: Callable[[str], None] = say_on_stderr  # what happens to them, said to the user
    # --gpu-time into running processes (--pid, --comm): the processes traced
    # once the probes are in, and each that joins later
    gpu_attach: GpuTimeAttach | None = None
    # the line saying how the trace ended waits for say_end() (the table's rows
    # on the same terminal come first), not said when the trace ends
    hold_end: bool = False
    # told of each process as it is given probes of its own (held at its open,
    # linked at a look, a --pid or the command at the start), from the gate's
    # thread too: while it surely runs (serve: its job labels, targets.jobs)
    on_process: Callable[[int], None] | None = None
    # told the tracer once every probe of the start is in, before the command
    # runs (serve --duty: cycles its links)
    on_started: Callable[[Tracer], None] | None = None


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
        self._held_end: str | None = None  # hold_end: said by say_end()
        self._all_exited = False
        self._ended: str | None = None  # what ended the trace, once said (ENDED_BY)
        self._status = 0  # the exit status, decided when the trace ended
        self._left: list[int] = []  # the command's descendants running when it exited
        self._traced_s: float | None = None
        self._signals_at_end = 0
        self._closed = False  # the BPF object: its targets map gone
        self.command: LaunchedCommand | None = None
        self.tracer: Tracer
        self.t0_ns = 0
        # --duration counts from here: t0, or with --gpu-time into running
        # processes, the instant their GPU time is recorded (the injection can
        # take seconds, and the window is for both)
        self._window_ns = 0
        self._stop = StopRequest()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> ProbeRun:
        try:
            self.command = (LaunchedCommand(self.options.command, self.options.command_env)
                            if self.options.command else None)
            self._stack.enter_context(self._stop)
            self.tracer = self._stack.enter_context(Tracer(self.plan, self.settings))
            if self.options.on_process is not None:
                self._tell_processes(self.options.on_process)
            if self.tracer.py is not None:
                self.tracer.py.notify = self.notify
                if self.tracer.autograd is not None:
                    self.tracer.autograd.notify = self.notify
                if self.command:
                    self.tracer.py.add_command(self.command.argv)
                elif self.options.targets is not None and self.options.targets.comm:
                    # a process exec'ing under the name later: the program of
                    # that name on PATH, and the pythons there
                    self.tracer.py.add_command([self.options.targets.comm])
            if self.command:
                self.tracer.attacher.add_target(self.command.pid)
            self.t0_ns = self._window_ns = time.monotonic_ns()
            gpu = self.options.gpu_attach if self.command is None else None
            if gpu is not None:  # before the gate opens: a later process is held for it
                self._gpu_for_later(gpu)
            if self.options.targets is not None:
                self._follower = Follower(self.options.targets, self.tracer.attacher, self.plan,
                                          self.probed, self.notify)
                if gpu is not None:
                    self._follower.on_later = gpu.later
            # every probe in: each function traced from this instant (the Follower
            # starts it already, before it says it is attached)
            self.tracer.attacher.start()
            if gpu is not None and self.options.targets is not None:  # (a node's: as found)
                gpu.attach_all(self.tracer.attacher.target_pids())
                self._window_ns = time.monotonic_ns()
            if self._on_attached is not None:
                self._on_attached(self)
            if self.options.on_started is not None:
                self.options.on_started(self.tracer)
        except BaseException:
            self._close()
            raise
        if self.command and self._stop.requested:  # stopped while attaching: never run it
            self.command.abandon()
        elif self.command:
            self.command.release()
            if self.command.exit_fd is not None and self.tracer.ring is not None:
                self.tracer.ring.wake_on(self.command.exit_fd)  # its exit seen at once
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _tell_processes(self, told: Callable[[int], None]) -> None:
        """`told` hears of each process given probes, after whoever hears already."""
        attacher = self.tracer.attacher
        before = attacher.on_target

        def both(pid: int) -> None:
            if before is not None:
                before(pid)
            told(pid)
        attacher.on_target = both

    def _gpu_for_later(self, gpu: GpuTimeAttach) -> None:
        """--gpu-time into running processes: a process that joins the trace
        later gets the library too, held at its open where the gate holds it."""
        gpu.libraries = self.tracer.attacher.probed_files  # (the safe point's calls, in each)
        self.tracer.attacher.on_held = gpu.held

    def _close(self) -> None:
        self._closed = True
        self.say_end()
        self._stack.close()
        if self.command is not None and not self.command.released:
            self.command.abandon()  # attach failed: the child exits without running

    @property
    def elapsed_s(self) -> float:
        return (time.monotonic_ns() - self.t0_ns) / 1e9

    def _window_over(self) -> bool:
        duration = self.options.duration
        return bool(duration) and (time.monotonic_ns() - self._window_ns) / 1e9 >= duration

    @property
    def traced_s(self) -> float:
        """How long the probes were in: until detach (not the drain after it)."""
        return self._traced_s if self._traced_s is not None else self.elapsed_s

    def running(self) -> bool:
        if self._stop.requested or self._all_exited:
            return False
        if self._follower is not None and self._follower.step():
            self.notify("every traced pid has exited: stopping")
            self._all_exited = True
            return False
        if self.command is not None and self.command.wait() is not None:
            return self._descendants_run()
        return not self._window_over()

    def _descendants(self) -> list[int]:
        """The command's descendants still running: the targets the fork hook
        added (a target gone is removed at the Follower's next rescan: here it
        is not counted once it has exited or is a zombie; a thread's id, which
        the fork hook sees too, is not a process)."""
        if self._closed:
            return []
        command = self.command.pid if self.command is not None else 0
        return sorted(pid for pid in self.tracer.attacher.target_pids()
                      if pid != command and process_running(pid))

    def _descendants_run(self) -> bool:
        """The command has exited: go on while a process it started runs (said
        once), unless --duration is over."""
        left = self._descendants()
        if left and not self._left:
            name = self.command.argv[0]
            self.notify(f"{name} exited (status {self.command.wait()}); {len(left)} of its "
                        f"descendants {'runs' if len(left) == 1 else 'run'} on (pid "
                        f"{_pids(left)}): tracing until the last exits, Ctrl-C to stop")
        self._left = left or self._left
        return bool(left) and not self._window_over()

    @property
    def drain_cut(self) -> bool:
        """A stop signal came after the one that ended the trace (a second Ctrl-C),
        or after the trace ended otherwise: the drain is to stop where it is."""
        return self._stop.count > min(self._signals_at_end, 1)

    def say_drain_cut(self, left: int) -> None:
        """The drain was cut short: said, and the exit status is the signal's."""
        signum = self._stop.last or signal.SIGINT
        self._status = 128 + signum
        self.notify(f"{signal.Signals(signum).name} during the drain: stopped it, {left} "
                    "records left undecoded (counted as lost: undecoded)")

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
            while ((command.wait() is None or self._descendants())
                   and time.monotonic() < deadline):
                if read is None:
                    time.sleep(GRACE_POLL_MS / 1000)
                else:
                    read(GRACE_POLL_MS)
        self._end()
        self.tracer.attacher.detach()
        if self._follower is not None:  # children linked at their making, or gone unprobed
            self._follower.tell_forked()
        self._traced_s = self.elapsed_s
        if self.options.gpu_attach is not None:
            self.options.gpu_attach.ask_stop()  # its GPU work ends with the window too
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
        self._end()

    def exit_status(self) -> int:
        """The exit status decided when the trace ended (_end): the command's own
        when its exit (and its descendants') ended it, 128+N after stop signal N,
        124 after --duration, as timeout(1); 0 without a command."""
        if self._ended is None:  # ended without finish() (output failed, never ran)
            self._end()
        return self._status

    def _end(self) -> None:
        """Say, once, what ended the trace, and decide the exit status."""
        if self._ended is not None:
            return
        command = self.command
        over = self._window_over() and not self._all_exited
        left = self._descendants() if command is not None and command.released else []
        status, message = end_of_trace(command, self._stop.signal, over, left, bool(self._left))
        if status is None:
            return  # tracing stopped on its own (output failed): decided at the command's exit
        if self._follower is not None:
            self._follower.count_processes()
            traced = self.probed.processes_traced
            if command is not None and traced and message:
                message += f"; {traced} process{'es' if traced > 1 else ''} traced"
        self._ended, self._status = message or "done", status
        self._signals_at_end = self._stop.count
        if message and self.options.hold_end:
            self._held_end = message
        elif message:
            self.notify(message)

    def say_end(self) -> None:
        """Say the line held by hold_end (once; at the latest on closing)."""
        message, self._held_end = self._held_end, None
        if message:
            self.notify(message)


def _pids(pids: list[int]) -> str:
    return ", ".join(map(str, pids[:5])) + (", ..." if len(pids) > 5 else "")


def end_of_trace(command: LaunchedCommand | None, signum: int | None, over: bool,
                 left: list[int], outlived: bool) -> tuple[int | None, str]:
    """What ended a trace, as said to the user, and cudaprobe's exit status: the
    command's own when its exit (and its descendants', `outlived`: some ran on
    after it) ended it; 128+N after stop signal N, 124 after --duration (as
    timeout(1)) while it or its descendants (`left`) ran on; 0 without a
    command. (None, "") while undecided: the command runs on, and neither a
    signal nor --duration stopped the trace (its output failed)."""
    why = (f"stopped by {signal.Signals(signum).name}" if signum
           else "--duration is over" if over else "")
    stopped = 128 + signum if signum else 124
    if command is None:
        return 0, f"{why}: tracing stopped" if why else ""
    status, name = command.wait(), command.argv[0]
    if not command.released:
        return stopped, f"{why or 'stopped'} before {name} was started: it did not run"
    if status is None:
        if not why:
            return None, ""
        return stopped, f"{why}: {name} (pid {command.pid}) keeps running, no longer traced"
    if left and why:
        keep = "keeps" if len(left) == 1 else "keep"
        return stopped, (f"{why}: {name} has exited (status {status}), {len(left)} of its "
                         f"descendants {keep} running (pid {_pids(left)}), no longer traced")
    if why:  # Ctrl-C at a terminal reaches the command too
        return status, f"{why}; {name} exited too (status {status}): its status is returned"
    return status, f"{name} exited (status {status})" + (
        ", and the last of its descendants after it" if outlived else "")
