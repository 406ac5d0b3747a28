"""The gate's hold of an exec, handed on for the GPU-time library: the exec
goes on before the injection starts. The gate also holds the exec's open of
its ELF interpreter, under the exec's credentials lock, which a ptrace
attach waits on: an injection started while the exec is held would wait on
the exec, and the exec on it (a traced program hung in execve). No root:
the Attacher's map and hooks are stand-ins."""

from __future__ import annotations

import threading

from cudaprobe.probe.attach import Attacher
from cudaprobe.probe.event import TRACING


class Targets(dict):
    def Key(self, pid: int) -> int:  # noqa: N802 - bcc's table interface
        return pid


def attacher(steps: list[str]) -> Attacher:
    a = Attacher.__new__(Attacher)
    a._bpf = {"targets": Targets({42: 1})}
    a._phase = TRACING
    a._lock = threading.Lock()
    a._pid_links = {42: []}
    a.on_exec = lambda pid, fd: steps.append(f"probed {pid}")

    def held(pid: int):
        def take_over(release):
            steps.append("injection starts")
            release()  # (the injection's own release: the exec's, already given)
        return take_over
    a.on_held = held
    return a


def test_an_exec_held_is_let_go_before_the_library_goes_in():
    steps: list[str] = []
    hand = attacher(steps)._exec_at_gate(42, fd=7)
    assert hand is not None
    hand(lambda: steps.append("exec let go"))
    assert steps == ["probed 42", "exec let go", "injection starts"]


def test_a_process_not_traced_is_not_held():
    steps: list[str] = []
    a = attacher(steps)
    a._execs_under_comm = lambda fd: False
    assert a._exec_at_gate(43, fd=7) is None and steps == []
