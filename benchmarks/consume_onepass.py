"""The ring reader's unpacking of one spool batch (12,000 records of one
length, as a launch loop makes them): one record at a time, as
RingBuffer.consume reads a batch of mixed lengths, against one pass over
the strided records (RingBuffer._all_one_length). Prints ms a batch, the
median of ROUNDS, and whether both give the same tuples.
    python benchmarks/consume_onepass.py
"""

from __future__ import annotations

import statistics
import struct
import time

from cudaprobe.probe.event import RECORD_STRUCTS
from cudaprobe.probe.ringbuf import DISCARD, HEADER

RECORDS, ROUNDS = 12_000, 20


def main() -> None:
    layout = RECORD_STRUCTS[6]  # a launch's words
    real = layout.size - HEADER.size
    step = (real + 15) & ~7
    one = bytearray(step)
    layout.pack_into(one, 0, 5_000_123, 41_200, 7, 8, 3, 6, 0, 35, b"python3", 0, -1,
                     *range(6))
    HEADER.pack_into(one, 0, real, 0)
    blob = bytes(one) * RECORDS

    def one_by_one() -> list[tuple]:
        out, pos, header, unpack = [], 0, HEADER.unpack_from, layout.unpack_from
        while pos + 8 <= len(blob):
            length = header(blob, pos)[0]
            if not length & DISCARD:
                out.append(unpack(blob, pos))
            pos += ((length & 0x3FFFFFFF) + 15) & ~7
        return out

    strided = struct.Struct(layout.format + f"{step - layout.size}x")

    def one_pass() -> list[tuple]:
        lengths = memoryview(blob).cast("I")[::step // 4].tolist()
        assert lengths.count(real) == RECORDS
        return list(strided.iter_unpack(blob))

    for name, f in (("one by one", one_by_one), ("one pass", one_pass)):
        times = []
        for _ in range(ROUNDS):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
        print(f"{name}: {statistics.median(times) * 1e3:.2f} ms a batch of {RECORDS:,}")
    print("same tuples:", one_by_one() == one_pass())


if __name__ == "__main__":
    main()
