"""The BPF ring buffer, read without loss: a reader process copies its
records to a spool file; decoding follows behind, from the spool.

Why two processes: the probes of four threads on two cores produce ~1M
records a second, and decoding one in Python costs 3-10 µs. A reader that
decodes drains the ring at a fraction of that rate, and the kernel drops the
rest (ringbuf_full). The reader here only finds the committed records and
copies them, raw, to the spool (an unlinked file under $TMPDIR) with one
pwrite a batch: a few million records a second per core, so the ring stays
empty while the decoder, at its own pace, reads the spool. As `perf record`
does; the decoder's lag costs disk (page cache), never records. The spool's
pages are freed (hole punched) behind the decoder, so a long trace that the
decoder keeps up with holds little.

Layout (kernel/bpf/ringbuf.c): page 0 holds consumer_pos (we write it), page 1
producer_pos, then the data pages, mapped twice. Each record has an 8-byte
header: u32 length with BUSY (bit 31) and DISCARD (bit 30) flags, u32 page
offset; records are 8-byte aligned. Because the data is mapped twice in a
row, the records between the two positions are one contiguous slice. The
spool holds the records as the ring had them, headers and all, discarded
ones too (the decoder skips them). A record longer than the longest layout
is that layout followed by a string (a kernel name read at exit, see
cp_named in bpf/trace.bpf.c): its bytes are the tuple's last item; or,
where its first word is 0, a side record (a Python stack), given as bytes.

The two positions are read and written as whole 8-byte words, through
memoryviews cast to "Q": struct's "<Q" reads and writes them a byte at a
time, and the kernel, which reads consumer_pos on every reserve, then saw
torn values (a position far behind or ahead: "ring full") and dropped about
8 events a second at 200k/s with the ring nearly empty. The count of bytes
spooled, shared between the two processes, is kept the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import select
import signal
import struct
import tempfile
import time
import traceback
from typing import Callable

from cudaprobe.errors import OutputError
from cudaprobe.probe.event import RECORD_FIELDS

BUSY = 1 << 31
DISCARD = 1 << 30
LENGTH = ~(BUSY | DISCARD) & 0xFFFFFFFF
HEADER = struct.Struct("<II")
# a side record (--py-stacks, bpf/pystacks.h) starts with a zero word where a
# call record has its entry time: handed over as its bytes, not unpacked
SIDE = bytes(8)

BATCH_BYTES = 1 << 20  # spool bytes unpacked per consume(): ~12k records, tens of ms to decode
AGAIN_BYTES = 256 << 10  # a copy this big: the reader goes again at once, more is coming
IDLE_MS = 50  # the reader's sleep on an empty ring (records without a forced wakeup wait this)
GATHER_MS = 2  # after a small copy: let records gather rather than copy a few at a time
BUSY_WAIT_S = 0.5  # at the end, how long a reserved record may stay uncommitted
PUNCH_BYTES = 8 << 20  # spool bytes read before their pages are freed

READER_NAME = "cudaprobe-read"  # the reader's comm: a child of cudaprobe besides the command
# the words shared by the two processes: bytes spooled, the reader's errno (spool writes)
WRITTEN, READER_ERRNO = 0, 1
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2


def committed(lengths: memoryview, start: int, available: int) -> int:
    """Bytes of whole committed records from data offset `start` (8-aligned),
    at most `available`: up to the first record still being written (BUSY).
    `lengths`: the data as u32 words."""
    pos, end = start, start + available
    while pos < end:
        length = lengths[pos >> 2]
        if length & BUSY:
            break
        pos += ((length & LENGTH) + 15) & ~7  # the header, the record, 8-byte aligned
    return pos - start


def _write_all(fd: int, data: memoryview, offset: int) -> None:
    while data:
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n


def strided_layout(record: struct.Struct) -> struct.Struct:
    """A record's layout with its padding to the next record (8-byte aligned)."""
    padding = ((record.size - HEADER.size + 15) & ~7) - record.size
    return struct.Struct(f"{record.format}{padding}x")


class Strided:
    """A batch of records of one length as the spool holds them: a field of
    every record read at once, at C's speed (column), the tuples made only
    where wanted (tuples: in the forked child that makes their rows). Unpacking
    a launch's 43 fields was 40% of the session's thread's time."""

    __slots__ = ("blob", "layout", "count")

    def __init__(self, blob: memoryview, layout: struct.Struct, count: int) -> None:
        self.blob, self.layout, self.count = blob, layout, count

    def __len__(self) -> int:
        return self.count

    def column(self, index: int) -> list[int]:
        """The field of tuple index `index` (event.RECORD_FIELDS) of every record."""
        code, offset = RECORD_FIELDS[index]
        size = struct.calcsize(code)
        return self.blob.cast(code)[offset // size :: self.layout.size // size].tolist()

    def one(self, i: int) -> tuple:
        return self.layout.unpack_from(self.blob, i * self.layout.size)

    def tuples(self) -> list[tuple]:
        return list(self.layout.iter_unpack(self.blob))


class RingBuffer:
    """The parent's side: the spool's records as flat tuples, a batch at a time.
    The reader process starts here and stops at drain() or close()."""

    def __init__(self, map_fd: int, size: int, records: list[struct.Struct]) -> None:
        """`records`: the layouts of header + event, one per event size; a record
        of another size is counted as malformed."""
        page = mmap.PAGESIZE
        self.size = size
        self.by_length = {r.size - HEADER.size: r.unpack_from for r in records}
        # each layout with its padding to the next record: a run of records of one
        # length, whole, unpacked at once (a launch loop's batch is nothing else)
        self.strided = {r.size - HEADER.size: strided_layout(r) for r in records}
        longest = max(records, key=lambda r: r.size)
        self.longest, self.unpack_longest = longest.size - HEADER.size, longest.unpack_from
        self.malformed = 0
        # a batch of records of one length given as a Strided, not tuples (the
        # session makes their rows in forked children, which unpack them there)
        self.keep_strided = False
        # where consume() hands the side records (--py-stacks: decode.pystacks.PyStacks.add)
        self.on_side: Callable[[list[bytes]], None] | None = None
        consumer = mmap.mmap(map_fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                             offset=0)
        data = mmap.mmap(map_fd, page + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
        # where the kernel has reserved up to (produced()), and where the reader
        # begins: the spool's offset 0
        self._producer_page = mmap.mmap(map_fd, page, mmap.MAP_SHARED, mmap.PROT_READ,
                                        offset=page)
        self._producer = memoryview(self._producer_page)[:8].cast("Q")
        self._base = memoryview(consumer)[:8].cast("Q")[0]
        self._shared = mmap.mmap(-1, 16)  # anonymous, MAP_SHARED: seen by both after fork
        self._words = memoryview(self._shared).cast("Q")
        spool = tempfile.TemporaryFile(prefix="cudaprobe-spool-")
        self._spool = os.dup(spool.fileno())
        spool.close()
        notify_r, notify_w = os.pipe()
        stop_r, self._stop_w = os.pipe()
        self._reader = os.fork()
        if self._reader == 0:  # the reader: never returns
            status = 1
            try:
                os.close(notify_r)
                os.close(self._stop_w)
                _reader_main(map_fd, consumer, data, size, self._spool, self._words, notify_w,
                             stop_r)
                status = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(status)
        os.close(notify_w)
        os.close(stop_r)
        consumer.close()
        data.close()
        self._notify = notify_r
        os.set_blocking(notify_r, False)
        self._poll = select.poll()
        self._poll.register(notify_r, select.POLLIN)
        self._wakers: set[int] = set()  # wake_on's
        self._read = 0  # spool bytes unpacked
        self._punched = 0  # spool bytes whose pages were freed
        self._punch = _fallocate()

    def wake_on(self, fd: int) -> None:
        """wait() returns too when `fd` turns readable (a command's pidfd: it
        exited), once: the fd is not waited on after that."""
        self._poll.register(fd, select.POLLIN)
        self._wakers.add(fd)

    def wait(self, timeout_ms: int) -> None:
        """Sleep until the reader spools something or the timeout passes."""
        if not self.available():
            for fd, _ in self._poll.poll(timeout_ms):
                if fd in self._wakers:
                    self._poll.unregister(fd)
                    self._wakers.discard(fd)
        try:
            os.read(self._notify, 4096)
        except BlockingIOError:
            pass

    def poll(self, timeout_ms: int) -> list[tuple] | Strided:
        """Wait up to timeout_ms for records when none are spooled, then the
        next batch (consume)."""
        if self.available() == 0:
            self.wait(timeout_ms)
        return self.consume()

    def produced(self) -> int:
        """The spool offset up to which the ring holds every record reserved by
        now: once consumed() reaches it, every record a process sent before
        this call has been given out (a process seen gone, then this: all of it)."""
        return self._producer[0] - self._base

    def consumed(self) -> int:
        """The spool offset up to which the records have been given out."""
        return self._read

    def available(self) -> int:
        """Spooled bytes not consumed yet."""
        return self._words[WRITTEN] - self._read

    def consume(self) -> list[tuple] | Strided:
        """The next spooled records (at most BATCH_BYTES of them), as flat tuples
        of their layout; [] when the decoder has caught up with the reader."""
        if self._words[READER_ERRNO]:
            code = self._words[READER_ERRNO]
            raise OutputError(f"writing the spool under {tempfile.gettempdir()} failed: "
                              f"{os.strerror(code)} (set TMPDIR to a roomier place)")
        n = min(self.available(), BATCH_BYTES)
        if n <= 0:
            return []
        blob = os.pread(self._spool, n, self._read)
        side: list[bytes] = []
        same = self._all_one_length(blob)
        out, pos = same if same is not None else self._one_by_one(blob, side)
        self._read += pos
        if side and self.on_side is not None:
            self.on_side(side)
        if self._read - self._punched >= PUNCH_BYTES:
            self._free_read()
        return out

    def _one_by_one(self, blob: bytes, side: list[bytes]) -> tuple[list[tuple], int]:
        """The batch's whole records, read one at a time (side records into
        `side`), and the bytes they take."""
        out: list[tuple] = []
        by_length, header = self.by_length, HEADER.unpack_from
        append = out.append
        pos, end = 0, len(blob)
        while pos + 8 <= end:
            length = header(blob, pos)[0]
            real = length & LENGTH
            step = (real + 15) & ~7
            if pos + step > end:
                break  # cut by BATCH_BYTES: whole next time
            if not length & DISCARD:
                unpack = by_length.get(real)
                if unpack is not None:
                    append(unpack(blob, pos))
                elif real > self.longest and blob[pos + 8 : pos + 16] == SIDE:
                    side.append(bytes(blob[pos + HEADER.size : pos + HEADER.size + real]))
                elif real > self.longest:  # an event and its string
                    text = bytes(blob[pos + HEADER.size + self.longest : pos + HEADER.size + real])
                    append(self.unpack_longest(blob, pos) + (text,))
                else:
                    self.malformed += 1
            pos += step
        return out, pos

    def _all_one_length(self, blob: bytes) -> tuple[list[tuple] | Strided, int] | None:
        """The batch's whole records and the bytes they take, where every one
        has the first's length (no flag, no side record, no string): unpacked
        in one pass (struct.iter_unpack), or with `keep_strided`, left as they
        are (Strided); None otherwise."""
        if len(blob) < 2 * HEADER.size:
            return None
        length = HEADER.unpack_from(blob, 0)[0]
        strided = self.strided.get(length)  # (a flag set: no such length)
        if strided is None:
            return None
        count = len(blob) // strided.size
        end = count * strided.size
        lengths = memoryview(blob)[:end].cast("I")[::strided.size // 4].tolist()
        if lengths.count(length) != count:
            return None
        if self.keep_strided:
            return Strided(memoryview(blob)[:end], strided, count), end
        return list(strided.iter_unpack(memoryview(blob)[:end])), end

    def drain(self) -> list[tuple] | Strided:
        """After the probes are detached: the reader copies what is left in the
        ring and exits; then the spool's records, a batch per call, [] at the end."""
        self._stop_reader()
        return self.consume()

    def skip_rest(self) -> int:
        """The drain cut short: the records left in the ring and the spool,
        counted (headers only, nothing unpacked) and skipped."""
        self._stop_reader()
        count, pos, end = 0, self._read, self._words[WRITTEN]
        while pos < end:
            blob = os.pread(self._spool, min(end - pos, BATCH_BYTES), pos)
            off = 0
            while off + HEADER.size <= len(blob):
                length = HEADER.unpack_from(blob, off)[0]
                step = ((length & LENGTH) + 15) & ~7
                if off + step > len(blob):
                    break  # cut by BATCH_BYTES: whole in the next read
                count += not length & DISCARD
                off += step
            if not off:
                break
            pos += off
        self._read = end
        return count

    def _stop_reader(self) -> None:
        if self._reader:
            os.close(self._stop_w)  # EOF: drain and exit
            os.waitpid(self._reader, 0)
            self._reader = 0

    def _free_read(self) -> None:
        """Give back the pages of the spool already read (where the file system can)."""
        end = self._read & ~(PUNCH_BYTES - 1)
        if self._punch is not None and end > self._punched:
            if self._punch(self._spool, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                           ctypes.c_long(self._punched), ctypes.c_long(end - self._punched)):
                self._punch = None  # not supported here: the spool keeps its pages
            self._punched = end

    def close(self) -> None:
        self._stop_reader()
        self._words.release()
        self._shared.close()
        self._producer.release()
        self._producer_page.close()
        for fd in (self._notify, self._spool):
            os.close(fd)


def _fallocate():  # -> the C library's fallocate, or None
    try:
        return ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None


def _reader_main(map_fd: int, consumer: mmap.mmap, data: mmap.mmap, size: int, spool: int,
                 words: memoryview, notify: int, stop: int) -> None:
    """The reader process: copy committed records from the ring to the spool
    until `stop` reads EOF, then what is left, and return."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as f:
        f.write(READER_NAME)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # Ctrl-C reaches the group: the parent decides
    # the uprobe links and programs: held here too, they would stay attached after detach
    os.closerange(3, min(map_fd, spool, notify, stop))
    keep = sorted((map_fd, spool, notify, stop))
    for low, high in zip(keep, keep[1:] + [os.sysconf("SC_OPEN_MAX")]):
        os.closerange(low + 1, high)
    os.set_blocking(notify, False)
    page, mask = mmap.PAGESIZE, size - 1
    consumer_pos = memoryview(consumer)[:8].cast("Q")
    producer_pos = memoryview(data)[:8].cast("Q")
    view = memoryview(data)
    lengths = view.cast("I")
    on_data = select.poll()  # data in the ring (or none within IDLE_MS), or the stop
    on_data.register(map_fd, select.POLLIN)
    on_data.register(stop, select.POLLIN)
    on_stop = select.poll()
    on_stop.register(stop, select.POLLIN)
    written, stopping, busy_since = 0, False, 0.0
    while True:
        cons = consumer_pos[0]
        available = producer_pos[0] - cons
        n = 0
        if available:
            start = page + (cons & mask)
            n = committed(lengths, start, available)
            if n:
                try:
                    _write_all(spool, view[start : start + n], written)
                except OSError as e:  # the parent says it; the kernel counts what is dropped
                    words[READER_ERRNO] = e.errno or errno.EIO
                    return
                written += n
                words[WRITTEN] = written
                consumer_pos[0] = cons + n
                try:
                    os.write(notify, b"\0")
                except BlockingIOError:
                    pass  # the pipe is full of wakeups already
                except BrokenPipeError:
                    return  # the parent is gone (killed): no one reads the spool
        if stopping:
            if n == available:
                return
            if not n:  # a record reserved and not committed yet
                busy_since = busy_since or time.monotonic()
                if time.monotonic() - busy_since > BUSY_WAIT_S:
                    return
                time.sleep(GATHER_MS / 1000)
            continue
        if n >= AGAIN_BYTES:
            continue
        # the ring's poll is ready while it holds anything: wait on it only when empty
        ready = on_data.poll(IDLE_MS) if not available else on_stop.poll(GATHER_MS)
        stopping = any(fd == stop for fd, _ev in ready)
