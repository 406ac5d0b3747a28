"""Where the seizer finds a child it interrupted: inside glibc's fork function
after the fork (its set_robust_list, say) the child has run none of its own
code and is sent on to its hold; past the function's return it has. Real
ptrace and this machine's glibc: a Python's child, taken from its fork by
PTRACE_O_TRACEFORK, then stepped one instruction at a time out of the fork."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cudaprobe.probe.forkhold import in_fork_function
from cudaprobe.targets.ptrace import PTRACE_EVENT_STOP, Stop, TracedThread, _call

from ..conftest import HANG_S

PTRACE_O_TRACEFORK, PTRACE_EVENT_FORK, PTRACE_SINGLESTEP = 2, 1, 9
SET_ROBUST_LIST = 273  # x86-64
STEPS_MAX = 10_000
FORKS = """if 1:
    import os, sys
    open(sys.argv[1]).read()
    pid = os.fork()  # glibc's fork()
    if pid == 0:
        os._exit(5)
    sys.exit(3 + os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))"""


def _child_of(pid: int) -> int:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def _taken(tid: int) -> TracedThread:
    """A thread the kernel attached to us (the fork's child, PTRACE_O_TRACEFORK)."""
    thread = TracedThread.__new__(TracedThread)
    thread.tid, thread.attached = tid, True
    return thread


def test_a_child_is_short_of_its_hold_until_it_returns_from_the_fork(tmp_path):
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    shell = subprocess.Popen([sys.executable, "-c", FORKS, str(fifo)])
    parent = TracedThread(shell.pid, PTRACE_O_TRACEFORK)
    child = None
    try:
        with open(fifo, "w") as f:
            f.write("x")
        stop = parent.wait(HANG_S)
        while stop is not None and stop.signal:  # a signal of its own: delivered
            parent.resume(stop.signal)
            stop = parent.wait(HANG_S)
        assert stop is not None and stop.event == PTRACE_EVENT_FORK
        child = _taken(_child_of(shell.pid))
        first = child.wait(HANG_S)  # its start: the fork's return, in the child
        assert first is not None and first.event == PTRACE_EVENT_STOP and first.interrupted
        known: dict = {}
        assert in_fork_function(child, first, known)
        # a signal's stop there is the program's own: never sent on
        assert not in_fork_function(child, Stop(signal=first.signal or 5), known)
        asked = Stop(event=PTRACE_EVENT_STOP, interrupted=True)
        inside, syscalls = [], []
        for _ in range(STEPS_MAX):
            _call(PTRACE_SINGLESTEP, child.tid)
            step = child.wait(HANG_S)
            assert step is not None and not step.exited
            regs = child.registers()
            if not in_fork_function(child, asked, known):
                break
            inside.append(regs.rip)
            syscalls.append(regs.orig_rax)
        else:
            raise AssertionError("never out of the fork function")
        # out of it: the caller's code, rax the fork's 0 in the child
        assert regs.rax == 0 and regs.rip not in inside
        assert len(set(inside)) >= 2
        assert SET_ROBUST_LIST in syscalls  # the child's syscall in glibc's fork
        assert not in_fork_function(child, asked, known)
    finally:
        if child is not None:
            child.detach()
        parent.detach()
    assert shell.wait(timeout=HANG_S) == 8  # the parent and its child unharmed
