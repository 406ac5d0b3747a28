"""Rows made by forked children, in parallel, written in call order.

One Python thread makes about 200,000 rows a second; a host whose programs
make more calls than that (a GPU node: four launch loops make 400,000 a
second) would have the trace written long after it ended. So, where there
are cores to spare, the session's thread takes a backlog of records (the
rows of a full spool batch or more) `FORK_RECORDS` at a time, and forks a
child that makes their rows exactly as the thread would (the same row
makers, caches and names: the child is the thread's copy at that moment),
writes them into a memfd and exits. Up to `workers` children run at once;
their rows go to the output in the order the records came, by the writing
thread, as the thread's own rows do. A child that fails has its records'
rows made by the thread instead: nothing is lost, nothing is out of order.
JSONL's and CSV's rows stand alone; Chrome's depend on the events before
them (tracks named once, flows numbered in turn), so once a child is
forked the thread moves the reporter past its records (Reporter.advance),
keeping the state that child began from for its rows should it fail.

A child changes nothing the thread keeps. So what making a row learns is
learnt by the thread first (`_prepare`): each process's first sight (its
rank, its maps), the kernel names of launches and their short forms, the
row makers themselves. What teaches later rows is made by the thread, after
every child's rows before it: a batch with a call decoded whole (NCCL,
module loads, which name handles) or a record holding a kernel's name as
the probe read it (it names its handle from then on). With
--py-stacks, --gpu-time or --max-size, and on a terminal, the thread makes
every row, as without workers.
"""

from __future__ import annotations

import collections
import mmap
import os
import signal
import struct
import time
from itertools import compress
from operator import itemgetter
from typing import TYPE_CHECKING, Callable

from cudaprobe.catalogue.functions import ArgKind
from cudaprobe.decode.records import TOP
from cudaprobe.probe.event import R_FUNC_ID, R_PID, R_TEXT
from cudaprobe.probe.ringbuf import Strided

if TYPE_CHECKING:
    from cudaprobe.decode.nesting import Mark
    from cudaprobe.decode.records import RecordDecoder
    from cudaprobe.output.base import Reporter
    from cudaprobe.output.files import OutputStream

FORK_RECORDS = 50_000  # records a child makes the rows of
MIN_FORK = 8_000  # fewer, at a poll's end: the thread makes them (a child costs a fork)
CHILD_WAIT_S = 60.0  # a child that takes longer is killed, its rows made by the thread
BACKLOG = 4_000  # a batch this big: the spool has more waiting (a poll's end keeps on)
HOLD_S = 0.25  # records kept at most this long before they go, backlog or not
HEADER = struct.Struct("<QQQ")  # the memfd's start: lines, records not decoded, the
# reporter's flags (rows_data, forked_rows)
WORKERS_ENV = "CUDAPROBE_DECODE_WORKERS"
_FUNC, _PID = itemgetter(R_FUNC_ID), itemgetter(R_PID)


def default_workers() -> int:
    """Children at once: the cores past the session's thread, the ring's
    reader and the traced programs' own (none on a machine of fewer than 4),
    at most 8; CUDAPROBE_DECODE_WORKERS sets it (0: none)."""
    text = os.environ.get(WORKERS_ENV)
    if text is not None and text.strip().isdigit():
        return min(int(text), 32)
    cores = len(os.sched_getaffinity(0))
    return 0 if cores < 4 else min(8, cores // 2)


class ForkedRows:
    """`take(records, nesting)` each batch in call order (False: the caller
    makes its rows, everything before them being out); `poll()` at each
    poll's end; `drain()` before anything else is written."""

    def __init__(self, reporter: Reporter, decoder: RecordDecoder, stream: OutputStream,
                 workers: int) -> None:
        self.reporter, self.decoder, self.stream = reporter, decoder, stream
        self.workers = workers
        # the records kept, in order: tuples, and batches still bytes (Strided)
        self._records: list[tuple | Strided] = []
        self._kept = 0  # records kept, a Strided's each
        self._nesting: list[Mark] = []
        # (child pid, memfd, its records, their nesting, the reporter's state before
        # them), oldest first
        self._children: collections.deque[tuple[int, int, list[tuple], list[Mark], object]] \
            = collections.deque()
        self._simple: set[int] = set()  # probe ids whose rows are made from words alone
        self._named: dict[int, list[tuple[ArgKind, int]]] = {}  # probe id -> name fields
        self._warm: set[tuple[int, int]] = set()  # (pid, address) named in the thread
        self._since = 0.0  # when the records kept began to be
        self._backlog = False  # the last batch taken was big: more are coming
        self.forked = 0  # children that made rows
        self.failed = 0  # children whose records the thread made instead

    @staticmethod
    def usable(reporter: Reporter, stream: object) -> bool:
        """A reporter that makes rows from records alone, writing to a file or pipe."""
        from cudaprobe.output.chrome import ChromeReporter  # noqa: PLC0415
        from cudaprobe.output.csv import CsvReporter  # noqa: PLC0415
        from cudaprobe.output.files import OutputStream  # noqa: PLC0415
        from cudaprobe.output.jsonl import JsonlReporter  # noqa: PLC0415
        return (type(reporter) in (JsonlReporter, CsvReporter, ChromeReporter)
                and not reporter.gpu_time
                and not reporter.py_stacks and isinstance(stream, OutputStream)
                and stream.threaded and stream.shown is None)

    def take(self, records: list[tuple], nesting: list[Mark] | None) -> bool:
        # a record holding a kernel's name as the probe read it names its handle
        # for the rows after it only: its batch is made here, in order
        if (self.decoder.py_stacks is not None or not records
                or max(map(len, records)) > R_TEXT
                or not self._all_simple(set(map(_FUNC, records)))):
            self.drain()
            return False
        self._prepare(records)
        self._keep(records, len(records), nesting)
        return True

    def take_strided(self, batch: Strided, fids: list[int]) -> bool:
        """take() of a batch still bytes, of these probes (its R_FUNC_ID column),
        each call at the top: its tuples made in the child (Reporter.advance
        reads its columns); False where it must be unpacked (the caller then
        does so, and take()s it)."""
        kinds = set(fids)
        if self.decoder.py_stacks is not None or not self._all_simple(kinds):
            return False
        self._prepare_strided(batch, fids, kinds)
        self._keep([batch], len(batch), None)
        return True

    def _keep(self, records: list, count: int, nesting: list[Mark] | None) -> None:
        if not self._kept:
            self._since = time.monotonic()
        self._backlog = count >= BACKLOG
        self._records += records
        self._kept += count
        self._nesting += [TOP] * count if nesting is None else nesting
        if self._kept >= FORK_RECORDS:
            self._fork()

    def poll(self) -> None:
        """A poll's end: what is kept goes (a child, or the thread for a few),
        unless more are coming and it is young; the rows of children done are
        written."""
        if self._kept and (not self._backlog
                           or time.monotonic() - self._since >= HOLD_S):
            self._let_go()
        self._collect(block=False)

    def drain(self) -> None:
        """Every record taken made into rows and given to the stream, in order."""
        if self._kept:
            self._let_go()
        self._collect(block=True)

    def _let_go(self) -> None:
        """The records kept: to a child, or, a few, made here."""
        if self._kept >= MIN_FORK:
            self._fork()
        else:
            self._here()

    def _all_simple(self, fids: set[int]) -> bool:
        for fid in fids - self._simple:
            if fid >= len(self.decoder.probes):
                return False
            d = self.decoder.decoder(fid)
            if not d.simple:
                return False
            self._simple.add(fid)
            fields = [(f.kind, f.index) for f in d.fields
                      if d.names is not None and f.kind in (ArgKind.FUNC, ArgKind.CU_FUNCTION)]
            if fields:
                self._named[fid] = fields
            self.decoder.maker(fid, self.reporter)  # made here, once: not in each child
        return True

    def _prepare(self, records: list[tuple]) -> None:
        """What making the rows learns, learnt here: processes first seen, the
        kernels' names (and their short forms, made once)."""
        decoder = self.decoder
        for pid in set(map(_PID, records)) - decoder.seen:
            decoder.see(pid)
        named, warm, names = self._named, self._warm, decoder.names
        if not named:
            return
        for rec in records:
            fields = named.get(rec[R_FUNC_ID])
            if fields is None:
                continue
            for kind, index in fields:
                key = (rec[R_PID], rec[index])
                if key in warm:
                    continue
                if kind is ArgKind.FUNC:
                    names.texts(rec, rec[index])
                    if names.known(*key):  # found for good (else asked again, as here)
                        warm.add(key)
                else:  # a handle's name as the handles know it now: they change only
                    names.handle_texts(rec, rec[index])  # by calls made here (a later
                    warm.add(key)  # name's texts are then made in the child)

    def _prepare_strided(self, batch: Strided, fids: list[int], kinds: set[int]) -> None:
        """_prepare() of a batch still bytes, from its columns: a record unpacked
        here only for a kernel not named yet."""
        decoder = self.decoder
        pids = batch.column(R_PID)
        for pid in set(pids) - decoder.seen:
            decoder.see(pid)
        for fid in kinds & self._named.keys():
            mine = None if len(kinds) == 1 else list(map(fid.__eq__, fids))
            for _kind, index in self._named[fid]:
                words = batch.column(index)
                keys = zip(pids, words)
                new = set(keys if mine is None else compress(keys, mine)) - self._warm
                for i, key in enumerate(zip(pids, words)):
                    if not new:
                        break
                    if key in new and (mine is None or mine[i]):
                        new.discard(key)
                        self._prepare([batch.one(i)])

    def _fork(self) -> None:
        records, nesting = self._records, self._nesting
        self._records, self._nesting, self._kept = [], [], 0
        while len(self._children) >= self.workers:
            self._collect_oldest()
        try:
            pid, fd = _fork_writing(lambda: self._made_here(records, nesting))
        except OSError:
            self._collect(block=True)
            self.reporter.records(unpacked(records), self.decoder, nesting)
            return
        before = self.reporter.state()  # for its rows, made here if it fails
        self.reporter.advance(records, self.decoder, nesting)
        self._children.append((pid, fd, records, nesting, before))

    def _made_here(self, records: list, nesting: list[Mark]) -> bytes:
        """In the child: the header and the batch's rows."""
        errors = self.decoder.errors
        data, lines, flags = self.reporter.rows_data(unpacked(records), self.decoder, nesting)
        return HEADER.pack(lines, self.decoder.errors - errors, flags) + data

    def _here(self) -> None:
        records, nesting = self._records, self._nesting
        self._records, self._nesting, self._kept = [], [], 0
        self._collect(block=True)
        self.reporter.records(unpacked(records), self.decoder, nesting)

    def _collect(self, block: bool) -> None:
        while self._children:
            pid = self._children[0][0]
            done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
            if done == 0:
                return
            self._take_rows(status)

    def _collect_oldest(self) -> None:
        self._take_rows(self._wait(self._children[0][0]))

    @staticmethod
    def _wait(pid: int) -> int:
        """The child's status; one that has not ended in CHILD_WAIT_S (it cannot
        take that long: a few hundred ms of rows) is killed, and fails."""
        deadline, pause = time.monotonic() + CHILD_WAIT_S, 0.0005
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                return os.waitpid(pid, 0)[1]
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    def _take_rows(self, status: int) -> None:
        """The oldest child has ended: its rows to the stream (its memfd mapped,
        written from there by the writing thread: never copied here), or, where
        it failed, its records' rows made here."""
        _, fd, records, nesting, before = self._children.popleft()
        view = _made(fd, status, HEADER.size)
        if view is None:
            self.failed += 1
            now = self.reporter.state()  # past the later children's records
            self.reporter.restore(before)
            self.reporter.records(unpacked(records), self.decoder, nesting)  # made here
            self.reporter.restore(now)
            return
        lines, errors, flags = HEADER.unpack(view[:HEADER.size])
        self.forked += 1
        self.decoder.errors += errors
        self.reporter.forked_rows(view[HEADER.size:], lines, flags)


def unpacked(records: list[tuple | Strided]) -> list[tuple]:
    """Records kept, each batch still bytes unpacked in its place."""
    if not any(type(r) is Strided for r in records):
        return records
    out: list[tuple] = []
    for r in records:
        if type(r) is Strided:
            out += r.tuples()
        else:
            out.append(r)
    return out


HELD_CALLS = 50_000  # held calls (--gpu-time) a child makes the rows of


def _fork_writing(make: Callable[[], bytes]) -> tuple[int, int]:
    """(a child's pid, its memfd): the child, forked, writes what `make()`
    gives into the memfd and exits (0, or 1 where make() raised). OSError
    where no child could be forked."""
    fd = os.memfd_create("cudaprobe-rows", os.MFD_CLOEXEC)
    try:
        pid = os.fork()
    except OSError:
        os.close(fd)
        raise
    if pid == 0:  # the child: rows into the memfd, then gone (never back to the caller)
        code = 1
        try:
            # no copy of the session's descriptors held: its probes' links (a
            # detach must not wait for a child), the reader's stop pipe, the output
            os.closerange(3, fd)
            os.closerange(fd + 1, os.sysconf("SC_OPEN_MAX"))
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the session's
            view = memoryview(make())
            while view:
                view = view[os.write(fd, view):]
            code = 0
        finally:
            os._exit(code)
    return pid, fd


def _made(fd: int, status: int, least: int) -> memoryview | None:
    """What a child that ended with `status` wrote into its memfd `fd` (closed
    here), mapped: written from there by the writing thread, never copied;
    None where it failed or wrote fewer than `least` bytes."""
    try:
        size = os.fstat(fd).st_size
        if os.waitstatus_to_exitcode(status) == 0 and size >= least:
            return memoryview(mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ))
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def held_rows_forked(reporter: Reporter, calls: list, decoder: RecordDecoder,
                     workers: int) -> bool:
    """--gpu-time's rows, held until the end and joined to their GPU work, made
    by forked children, HELD_CALLS calls each, up to `workers` at once, and
    written in call order (JSONL, to a file or pipe: its lines stand alone). A
    child that fails has its calls' rows made here. False where nothing was
    done (not JSONL, too few calls, no workers): the caller makes them."""
    from cudaprobe.output.files import OutputStream  # noqa: PLC0415
    from cudaprobe.output.jsonl import JsonlReporter  # noqa: PLC0415
    stream = getattr(reporter, "stream", None)
    if (type(reporter) is not JsonlReporter or workers < 1 or len(calls) < 2 * HELD_CALLS
            or not isinstance(stream, OutputStream) or not stream.threaded
            or stream.shown is not None):
        return False
    children: collections.deque[tuple[int, int, list]] = collections.deque()

    def take_oldest() -> None:
        pid, fd, chunk = children.popleft()
        view = _made(fd, ForkedRows._wait(pid), 1)
        if view is None:
            reporter.held_calls(chunk, decoder)  # made here instead
        else:
            reporter.forked_rows(view, len(chunk), 0)

    for start in range(0, len(calls), HELD_CALLS):
        chunk = calls[start : start + HELD_CALLS]
        while len(children) >= workers:
            take_oldest()
        try:
            pid, fd = _fork_writing(
                lambda chunk=chunk: "".join(reporter.held_lines(chunk, decoder)).encode())
        except OSError:
            while children:
                take_oldest()
            reporter.held_calls(chunk, decoder)
            continue
        children.append((pid, fd, chunk))
    while children:
        take_oldest()
    return True

