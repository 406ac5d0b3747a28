"""Keeping the pairing map clean on long runs.

An entry probe stores the call in `inflight` until its return probe takes it
out. A thread that exits in the middle of a call (pthread_exit, a process
killed or exiting from another thread) never returns, so its entries would
stay until the map is full and new calls go unpaired. Every SWEEP_S the map
is walked and the entries of threads that no longer exist are removed and
counted (the summary's `exited_mid_call`).

Events carry host pids. They are checked against /proc only when cudaprobe
runs in the initial pid namespace, where /proc shows those pids; elsewhere
nothing is swept (and `cudaprobe doctor` says so).
"""

from __future__ import annotations

import os
import time
from typing import Callable, Protocol

SWEEP_S = 2.0
INIT_PID_NS_INODE = 0xEFFFFFFC  # PROC_PID_INIT_INO: the same on every kernel


def host_pids_visible() -> bool:
    try:
        return os.stat("/proc/self/ns/pid").st_ino == INIT_PID_NS_INODE
    except OSError:
        return False


def thread_alive(pid: int, tid: int) -> bool:
    return os.path.exists(f"/proc/{pid}/task/{tid}")


class Forgets(Protocol):
    def forget_exited(self, alive: Callable[[int, int], bool]) -> int: ...


class Sweeper:
    def __init__(self, every_s: float = SWEEP_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = host_pids_visible()
        self.every_s = every_s
        self.clock = clock
        self.next = clock() + every_s
        self.removed = 0

    def due(self, entries: Forgets) -> None:
        """Sweep if SWEEP_S passed since the last time."""
        if self.clock() >= self.next:
            self.now(entries)

    def now(self, entries: Forgets) -> None:
        if self.enabled:
            self.removed += entries.forget_exited(thread_alive)
        self.next = self.clock() + self.every_s
