"""Drives --gpu-time's injection into a running process for the tests, in a
process of its own, so that a test can kill it (SIGKILL, as `kill -9` does)
at a chosen point of the injection, deterministically: the point is reached
through the real code, which is wrapped here to kill this process there.

Usage: python attach_helper.py PID CYCLES [KILL_POINT]
Runs CYCLES attach/stop cycles (one set of safe-point probes for all: their
compile is not what is tested) and prints one JSON line per cycle: what was
said, and how many GPU records came back. With KILL_POINT, the first cycle
dies there (see POINTS).
"""

from __future__ import annotations

import json
import os
import signal
import sys

import cudaprobe.sessions.gputime_attach as ga
import cudaprobe.sessions.gputime_inject as gi
from cudaprobe.targets import ptrace


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def after(owner: object, name: str, when: object = None) -> None:
    """Wrap owner.name so that the process dies once it has returned."""
    original = getattr(owner, name)

    def wrapped(*args: object, **kw: object) -> object:
        result = original(*args, **kw)
        if when is None or when(*args, **kw):
            die()
        return result
    setattr(owner, name, wrapped)


POINTS = {
    # seized, the safe-point signal not yet asked for
    "seized": lambda: after(ptrace.TracedThread, "__init__"),
    # the probe armed: the signal comes with no tracer
    "armed": lambda: after(gi.SafePoint, "arm"),
    # stopped at the safe point, nothing changed yet
    "stopped": lambda: after(gi.Injector, "_caught", lambda *a: True),
    # the frame written and rip/rsp moved, not yet let go
    "moved": lambda: after(ptrace.TracedThread, "set_registers"),
    # stage 1: the stub's memfd made, not filled, F_GO not given
    "stage1": lambda: setattr(gi.Injector, "_fill", lambda self, process, fd: die()),
    # stage 2: the library loaded and recording, the thread not yet let go
    "stage2": lambda: after(gi, "run_stub"),
    # recording, heartbeat running: the library's watcher must stop it alone
    "recording": lambda: after(ga.GpuTimeAttach, "_started"),
}


SAFE_POINT = gi.SafePoint
SafePointProgram = gi.SafePointProgram


class OneSafePoint:
    """The safe-point probes compiled once and kept open for every cycle."""

    def __init__(self) -> None:
        self.point: gi.SafePoint | None = None

    def __call__(self, pid: int, libraries: list[str], inside: list,
                 program: object = None) -> OneSafePoint:
        if self.point is None:  # on a program of its own: each cycle's is closed at its end
            self.point = SAFE_POINT(pid, libraries, inside,
                                    SafePointProgram.for_this_kernel()).__enter__()
        for key in list(self.point._bpf["seen"].keys()):  # fresh counts per cycle
            del self.point._bpf["seen"][key]
        return self

    def __enter__(self) -> gi.SafePoint:
        return self.point

    def __exit__(self, *exc: object) -> None:
        pass


def main() -> None:
    pid, cycles = int(sys.argv[1]), int(sys.argv[2])
    if len(sys.argv) > 3:
        POINTS[sys.argv[3]]()
    gi.SafePoint = OneSafePoint()  # type: ignore[misc, assignment]
    for _ in range(cycles):
        said: list[str] = []
        gpu = ga.GpuTimeAttach(said.append)
        gpu.attach(pid)
        work = gpu.read()
        gpu.close()
        print(json.dumps({"said": said, "kernels": [w.name for w in work]}), flush=True)


if __name__ == "__main__":
    main()
