"""The ring reader (probe/ringbuf.py) on a ring laid out as the kernel's, in a
memfd: page 0 consumer_pos, page 1 producer_pos, then the data. The reader
process is the real one; the test plays the kernel's part."""

from __future__ import annotations

import mmap
import os
import struct
import time

from cudaprobe.probe.ringbuf import BUSY, DISCARD, HEADER, RingBuffer, committed

PAGE = mmap.PAGESIZE
SIZE = 4 * PAGE
EVENT = struct.Struct("<QQ")  # a stand-in event: two words
LAYOUTS = [struct.Struct("<8xQQ"), struct.Struct("<8xQ")]


class FakeRing:
    def __init__(self) -> None:
        self.fd = os.memfd_create("ring")
        os.ftruncate(self.fd, 2 * PAGE + 2 * SIZE)
        self.map = mmap.mmap(self.fd, 2 * PAGE + 2 * SIZE)
        self.producer = memoryview(self.map)[PAGE : PAGE + 8].cast("Q")
        self.consumer = memoryview(self.map)[:8].cast("Q")

    def put(self, payload: bytes, flags: int = 0) -> int:
        """A record at the producer position; returns its header's offset."""
        pos = self.producer[0]
        at = 2 * PAGE + pos
        HEADER.pack_into(self.map, at, len(payload) | flags, 0)
        self.map[at + 8 : at + 8 + len(payload)] = payload
        self.producer[0] = pos + ((len(payload) + 15) & ~7)
        return at


def wait_for(ring: RingBuffer, n: int) -> list[tuple]:
    out: list[tuple] = []
    deadline = time.monotonic() + 5
    while len(out) < n and time.monotonic() < deadline:
        ring.wait(50)
        out += ring.consume()
    return out


def test_committed_stops_at_the_first_busy_record():
    data = bytearray(64)
    HEADER.pack_into(data, 0, 16, 0)  # 8 + 16: 24 bytes
    HEADER.pack_into(data, 24, 8 | DISCARD, 0)  # 16 bytes, discarded: still passed over
    HEADER.pack_into(data, 40, 8 | BUSY, 0)
    lengths = memoryview(data).cast("I")
    assert committed(lengths, 0, 64) == 40
    assert committed(lengths, 0, 24) == 24
    assert committed(lengths, 40, 24) == 0


def test_records_come_through_the_spool_in_order_and_busy_ones_wait():
    fake = FakeRing()
    ring = RingBuffer(fake.fd, SIZE, LAYOUTS)
    try:
        fake.put(EVENT.pack(1, 2))
        fake.put(struct.pack("<Q", 3), DISCARD)  # skipped
        busy = fake.put(struct.pack("<Q", 4), BUSY)
        fake.put(EVENT.pack(5, 6))
        assert wait_for(ring, 1) == [(1, 2)]
        time.sleep(0.05)
        assert ring.consume() == []  # the busy record holds back the ones behind it
        HEADER.pack_into(fake.map, busy, 8, 0)  # committed now
        assert wait_for(ring, 2) == [(4,), (5, 6)]
        assert fake.consumer[0] == fake.producer[0]  # the ring is empty again
        fake.put(bytes(12))  # no layout of that size
        # longer than the longest layout: that layout, then a string (a kernel name)
        fake.put(EVENT.pack(7, 8) + b"vecAdd\0")
        assert ring.drain() == [(7, 8, b"vecAdd\0")] and ring.malformed == 1
        assert ring.drain() == []
    finally:
        ring.close()


def test_what_was_reserved_by_a_moment_is_known_given_out_only_once_it_all_is():
    """memory's exits: a process seen gone, the ring's position then
    (produced) is where its last record ends; its leaks are declared once the
    records given out reach it (consumed), not while one of them is still
    being written or waits in the ring or the spool."""
    fake = FakeRing()
    ring = RingBuffer(fake.fd, SIZE, LAYOUTS)
    try:
        fake.put(EVENT.pack(1, 2))
        busy = fake.put(struct.pack("<Q", 3), BUSY)  # reserved, not committed yet
        mark = ring.produced()
        fake.put(EVENT.pack(4, 5))  # after the moment
        assert mark == 24 + 16
        assert wait_for(ring, 1) == [(1, 2)]
        time.sleep(0.05)
        assert ring.consume() == [] and ring.consumed() == 24 < mark
        HEADER.pack_into(fake.map, busy, 8, 0)
        assert wait_for(ring, 2) == [(3,), (4, 5)]
        assert ring.consumed() == mark + 24
    finally:
        ring.close()


def test_the_drain_takes_what_the_ring_still_holds():
    fake = FakeRing()
    ring = RingBuffer(fake.fd, SIZE, LAYOUTS)
    try:
        for i in range(100):  # 2400 bytes: the reader may not have run yet
            fake.put(EVENT.pack(i, i))
        got = []
        while batch := ring.drain():
            got += batch
        assert got == [(i, i) for i in range(100)]
    finally:
        ring.close()


def test_records_of_one_length_unpacked_at_once_are_those_read_one_by_one(monkeypatch):
    """A batch whose records all have one length is unpacked in one pass; one of
    another length, a discarded one, or a batch cut mid-record (BATCH_BYTES)
    gives the same records, in order, as reading them one by one."""
    from cudaprobe.probe import ringbuf  # noqa: PLC0415
    monkeypatch.setattr(ringbuf, "BATCH_BYTES", 24 * 7 + 10)  # 7 whole records, a cut one
    fake = FakeRing()
    ring = RingBuffer(fake.fd, SIZE, LAYOUTS)
    expected = []
    try:
        for i in range(60):
            if i == 23:
                fake.put(struct.pack("<Q", 1000 + i))  # another length
                expected.append((1000 + i,))
            elif i == 41:
                fake.put(EVENT.pack(i, i), DISCARD)  # passed over
            else:
                fake.put(EVENT.pack(i, 2 * i))
                expected.append((i, 2 * i))
        got = []
        while batch := ring.drain():
            got += batch
        assert got == expected
    finally:
        ring.close()


def test_a_reader_whose_parent_is_gone_exits_quietly(capfd):
    """serve killed (kill -9): the reader process finds the wakeup pipe's other
    end closed as it says a record came. It stops there, status 0, no
    traceback on the stderr it shares with the traced program's terminal."""
    fake = FakeRing()
    ring = RingBuffer(fake.fd, SIZE, LAYOUTS)
    os.close(ring._notify)  # the parent's end of the wakeups: gone, as with its death
    fake.put(EVENT.pack(1, 2))
    _, status = os.waitpid(ring._reader, 0)
    ring._reader = 0
    os.close(ring._stop_w)
    os.close(ring._spool)
    assert os.waitstatus_to_exitcode(status) == 0
    assert "Traceback" not in capfd.readouterr().err
