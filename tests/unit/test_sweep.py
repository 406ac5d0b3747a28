"""The pairing-map sweep: when it runs, what it asks, what it counts."""

from __future__ import annotations

import os
import subprocess
import threading
import time

from cudaprobe.probe import sweep


class FakeTracer:
    def __init__(self, entries: list[tuple[int, int]]) -> None:
        self.entries = entries
        self.sweeps = 0

    def forget_exited(self, alive) -> int:
        self.sweeps += 1
        dead = [e for e in self.entries if not alive(*e)]
        self.entries = [e for e in self.entries if e not in dead]
        return len(dead)


def test_sweeps_every_period_and_counts_what_it_removed(monkeypatch):
    monkeypatch.setattr(sweep, "host_pids_visible", lambda: True)
    now = [100.0]
    s = sweep.Sweeper(every_s=2.0, clock=lambda: now[0])
    gone = subprocess.Popen(["true"])
    gone.wait()
    me = (os.getpid(), threading.get_native_id())
    tracer = FakeTracer([me, (gone.pid, gone.pid)])
    s.due(tracer)
    assert tracer.sweeps == 0  # not yet
    now[0] += 2.0
    s.due(tracer)
    assert tracer.sweeps == 1 and tracer.entries == [me] and s.removed == 1
    now[0] += 1.0
    s.due(tracer)
    assert tracer.sweeps == 1
    s.now(tracer)  # at the end of a trace, whenever it is
    assert tracer.sweeps == 2 and s.removed == 1


def test_no_sweep_where_proc_shows_other_pids(monkeypatch):
    monkeypatch.setattr(sweep, "host_pids_visible", lambda: False)
    tracer = FakeTracer([(1, 2)])
    s = sweep.Sweeper()
    s.now(tracer)
    assert tracer.sweeps == 0 and s.removed == 0


def test_threads_are_alive_until_they_are_not():
    assert sweep.thread_alive(os.getpid(), threading.get_native_id())
    t = threading.Thread(target=lambda: None)
    t.start()
    tid = t.native_id
    t.join()  # returns as Python is done with it, a moment before the kernel is
    deadline = time.monotonic() + 5
    while sweep.thread_alive(os.getpid(), tid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not sweep.thread_alive(os.getpid(), tid)


def test_this_test_runs_in_the_initial_pid_namespace_or_says_not():
    in_init = os.stat("/proc/self/ns/pid").st_ino == sweep.INIT_PID_NS_INODE
    assert sweep.host_pids_visible() == in_init
