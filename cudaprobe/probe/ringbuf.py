"""A BPF ring buffer consumer in Python, over the map's mmap.

bcc calls a ctypes callback per record (about 1-2 µs each). The kernel maps
the data area twice in a row, so the records between the consumer and
producer positions are one contiguous slice: a batch is read with one copy,
then each record unpacked by the struct of its length (our records come in a
few fixed sizes).

Layout (kernel/bpf/ringbuf.c): page 0 holds consumer_pos (we write it), page 1
producer_pos, then the data pages, mapped twice. Each record has an 8-byte
header: u32 length with BUSY (bit 31) and DISCARD (bit 30) flags, u32 page
offset; records are 8-byte aligned. A record longer than the longest layout
is that layout followed by a string (a kernel name read at exit, see
cp_named in bpf/cudaprobe.bpf.c): its bytes are the tuple's last item.

The two positions are read and written as whole 8-byte words, through
memoryviews cast to "Q": struct's "<Q" reads and writes them a byte at a
time, and the kernel, which reads consumer_pos on every reserve, then saw
torn values (a position far behind or ahead: "ring full") and dropped about
8 events a second at 200k/s with the ring nearly empty.
"""

from __future__ import annotations

import mmap
import select
import struct

BUSY = 1 << 31
DISCARD = 1 << 30
HEADER = struct.Struct("<II")


class RingBuffer:
    def __init__(self, map_fd: int, size: int, records: list[struct.Struct]) -> None:
        """`records`: the layouts of header + event, one per event size; a record
        of another size is counted as malformed."""
        page = mmap.PAGESIZE
        self.size = size
        self.mask = size - 1
        self.by_length = {r.size - HEADER.size: r.unpack_from for r in records}
        longest = max(records, key=lambda r: r.size)
        self.longest, self.unpack_longest = longest.size - HEADER.size, longest.unpack_from
        self._consumer = mmap.mmap(map_fd, page, mmap.MAP_SHARED,
                                   mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self._data = mmap.mmap(map_fd, page + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ,
                               offset=page)
        self._page = page
        self._consumer_pos = memoryview(self._consumer)[:8].cast("Q")
        self._producer_pos = memoryview(self._data)[:8].cast("Q")
        self._poll = select.poll()
        self._poll.register(map_fd, select.POLLIN)
        self.malformed = 0

    def wait(self, timeout_ms: int) -> None:
        """Sleep until the kernel forces a wakeup or the timeout passes."""
        self._poll.poll(timeout_ms)

    def available(self) -> int:
        return self._producer_pos[0] - self._consumer_pos[0]

    def consume(self) -> list[tuple]:
        """All committed records, as flat tuples of their layout."""
        cons = self._consumer_pos[0]
        prod = self._producer_pos[0]
        if prod <= cons:
            return []
        start = self._page + (cons & self.mask)
        blob = self._data[start : start + (prod - cons)]
        out: list[tuple] = []
        by_length, header = self.by_length, HEADER.unpack_from
        append = out.append
        pos, end = 0, len(blob)
        while pos + 8 <= end:
            length = header(blob, pos)[0]
            if length & BUSY:
                break  # reserved, not yet submitted: resume here next time
            real = length & ~(BUSY | DISCARD)
            if not length & DISCARD:
                unpack = by_length.get(real)
                if unpack is not None:
                    append(unpack(blob, pos))
                elif real > self.longest:  # an event and its string
                    text = bytes(blob[pos + HEADER.size + self.longest : pos + HEADER.size + real])
                    append(self.unpack_longest(blob, pos) + (text,))
                else:
                    self.malformed += 1
            pos += (real + 15) & ~7  # the header, the event, 8-byte aligned
        self._advance(cons + pos)
        return out

    def _advance(self, cons: int) -> None:
        self._consumer_pos[0] = cons

    def close(self) -> None:
        self._consumer_pos.release()
        self._producer_pos.release()
        self._consumer.close()
        self._data.close()
