"""The links of processes gone are closed on threads of their own
(LinkCloser); at the end, those still queued go to the background closer
with the rest, not left for the kernel to close one by one as cudaprobe
exits (a grace period each: seconds after a forking DataLoader loop). Real
descriptors (pipes: a read end sees EOF once every copy of its write end is
closed) and the real closer process; the Attacher is a stand-in without a
program."""

from __future__ import annotations

import os
import select
import threading

from cudaprobe.probe.attach import Attacher, LinkCloser
from cudaprobe.probe.event import TRACING

WAIT_S = 60  # a bound on waiting for a state, never a measure


class Queued(LinkCloser):
    """Queues and never closes: what the threads had not come to yet."""

    THREADS = 0


def pipes(n: int) -> tuple[list[int], list[int]]:
    pairs = [os.pipe() for _ in range(n)]
    return [r for r, _ in pairs], [w for _, w in pairs]


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_what_is_still_queued_is_taken_whole_and_in_order():
    reads, writes = pipes(5)
    closer = Queued()
    closer.close(writes[:3])
    closer.close(writes[3:])
    assert closer.take_pending() == writes
    assert closer.take_pending() == []
    assert all(is_open(fd) for fd in writes)  # taken, not closed
    for fd in reads + writes:
        os.close(fd)


def test_the_threads_close_what_they_are_given():
    reads, writes = pipes(40)
    LinkCloser().close(writes)
    for fd in reads:
        ready, _, _ = select.select([fd], [], [], WAIT_S)
        assert ready and os.read(fd, 1) == b""  # EOF: its write end closed
        os.close(fd)


def stand_in(closer: LinkCloser) -> Attacher:
    a = Attacher.__new__(Attacher)
    a._bpf = None
    a.gate = None
    a._holds = None
    a._lock = threading.Lock()
    a._phase = TRACING
    a._links, a._kept_links, a._pid_links = [], [], {}
    a._forks = None
    a._linker = None
    a._closer = closer
    return a


def test_links_still_queued_at_the_end_go_to_the_background_closer():
    reads, writes = pipes(12)
    closer = Queued()
    closer.close(writes)
    stand_in(closer).detach()
    assert closer.take_pending() == []
    assert not any(is_open(fd) for fd in writes)  # ours closed at once
    for fd in reads:  # and the closer's copies, by the closer
        ready, _, _ = select.select([fd], [], [], WAIT_S)
        assert ready and os.read(fd, 1) == b""
        os.close(fd)
