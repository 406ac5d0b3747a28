"""Tracer's Finder: on a node, processes found by their first call are read on a
thread of their own, in the order found, while the decoder goes on."""

from __future__ import annotations

import threading
import time

from cudaprobe.errors import CudaprobeError
from cudaprobe.probe.tracer import Finder

from ..conftest import HANG_S


def test_found_returns_while_a_process_is_read_and_each_is_seen_in_order():
    reading = threading.Event()
    go = threading.Event()
    seen: list[int] = []
    done = threading.Event()

    def see(pid: int) -> None:
        if pid == 1:
            reading.set()
            assert go.wait(HANG_S)
        if pid == 2:
            raise CudaprobeError("gone before it was read")
        seen.append(pid)
        if pid == 4:
            done.set()

    finder = Finder(see)
    finder.found(1)
    assert reading.wait(HANG_S)  # pid 1 being read, the caller free
    for pid in (2, 3, 4):
        finder.found(pid)
    go.set()
    assert done.wait(HANG_S)
    assert seen == [1, 3, 4]  # 2 was gone: the thread went on
    finder.close()
    assert not finder._thread.is_alive()


def test_close_drops_what_is_not_yet_read():
    reading = threading.Event()
    go = threading.Event()
    seen: list[int] = []

    def see(pid: int) -> None:
        reading.set()
        assert go.wait(HANG_S)
        seen.append(pid)

    finder = Finder(see)
    for pid in (1, 2, 3):
        finder.found(pid)
    assert reading.wait(HANG_S)  # 1 being read; 2 and 3 wait
    closing = threading.Thread(target=finder.close)
    closing.start()
    while finder._pids.qsize() != 1:  # 2 and 3 dropped, the end put in
        assert closing.is_alive()
        time.sleep(0.001)
    go.set()
    closing.join(HANG_S)
    assert not finder._thread.is_alive() and seen == [1]
