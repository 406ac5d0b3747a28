"""GPU activity from cupti/gputime.c: its files read, its records decoded, and
each kernel, copy and memset joined to the traced call that made it.

The library writes one file per process (gputime.<pid>.bin: a header, then
fixed-size records, some followed by text; layout in cupti/gputime.h, checked
against this mirror by tests/unit/test_gputime.py). CUPTI hands its
records over in batches, so a file grows while the program runs and its last
record may be cut short: `GpuReader.poll()` reads what is new and keeps an
unfinished tail for the next poll.

The join: a GPU record's correlation id names the runtime or driver API
record of the call that queued it, which carries the thread (the kernel's
tid: the library asks CUPTI for system thread ids, not its default
pthread_self()) and the call's CPU start and end (taken inside the call).
The traced call it belongs to is the outermost call of that thread whose
uprobe interval contains the API interval: the call the program made (cudaLaunchKernel, not the
cuLaunchKernel it made in turn). Where no traced call contains it (the API call
was made by a runtime linked statically into cuBLAS, which has no symbols to
probe), the first traced call inside it: the driver call that queued the work.
Timestamps are CLOCK_MONOTONIC ns, the clock of bpf_ktime_get_ns, or (a
process attached to, whose CUPTI already ran) CUPTI's own clock moved onto it
with the offset the library read when it opened the file (header `clock`).
That offset is one reading, and the join needs the API record inside a call
of a few microseconds: such a process's records are aligned by the records
themselves first (`align`): the API records and the traced calls of the same
thread and function vote on the offset still missing, and the one most agree
on is added to its GPU and API timestamps alike.
"""

from __future__ import annotations

import bisect
import json
import os
import random
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cudaprobe.decode.calls import Call

HEADER = struct.Struct("<8sIIIIqII")
RECORD = struct.Struct("<HHIQQQIIIIIIBB6x")
MAGIC = b"CPGPUT1\0"
VERSION = 3
CLOCK_REALTIME, CLOCK_MONOTONIC = 0, 1
# which calls CUPTI made API records of (API_NONE: an attach for serve, which joins nothing;
# API_CALLS: the library made them from CUPTI's callbacks on the calls that queue work)
API_UNKNOWN, API_SELECTED, API_ALL, API_NONE, API_CALLS = 0, 1, 2, 3, 4
KERNEL, MEMCPY, MEMSET, API, NAME, FUNCTION, STATUS, DROPPED = range(1, 9)
DOMAIN_DRIVER, DOMAIN_RUNTIME = 4, 5  # CUPTI_ACTIVITY_KIND_DRIVER, _RUNTIME

# field name -> byte offset, in declaration order (checked against the C header)
HEADER_OFFSETS = {"magic": 0, "version": 8, "pid": 12, "clock": 16, "record_size": 20,
                  "realtime_to_monotonic_ns": 24, "system_tids": 32,
                  "api_records": 36}
RECORD_OFFSETS = {"type": 0, "size": 2, "correlation": 4, "start": 8, "end": 16, "bytes": 24,
                  "device": 32, "context": 36, "stream": 40, "tid": 44, "cbid": 48,
                  "name_id": 52, "domain": 56, "copy_kind": 57}

# CUpti_ActivityMemcpyKind -> the name nsys stats uses
COPY_KINDS = {0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA",
              6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
KIND_NAMES = {KERNEL: "kernel", MEMCPY: "memcpy", MEMSET: "memset"}
_VERSION_SUFFIX = re.compile(r"_v\d+$")


@dataclass
class ApiCall:
    """The CPU side of a call that queued GPU work, as CUPTI recorded it."""
    tid: int
    start_ns: int
    end_ns: int
    function: str  # CUPTI's name less its _vNNNN suffix: cudaLaunchKernel, cuMemcpyHtoD


@dataclass
class GpuWork:
    """One kernel, copy or memset, as it ran on the device."""
    pid: int
    kind: str  # kernel, memcpy, memset
    start_ns: int
    end_ns: int
    device: int
    context: int
    stream: int
    correlation: int
    name: str = ""  # kernel: its (mangled) name; memcpy: the copy kind (HtoD, ...)
    bytes: int = 0
    api: ApiCall | None = None  # the call that queued it, once its record is read

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def gpu_span_ns(work: list[GpuWork]) -> int:
    """From the first start to the last end of a call's GPU work."""
    return max(w.end_ns for w in work) - min(w.start_ns for w in work)


# compact JSON, as output/recordtext.py's encode writes it
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, check_circular=False).encode


def gpu_json(work: list[GpuWork]) -> str:
    """gpu_object's JSON text (compact, as recordtext.encode writes it): a
    single kernel, the most common, spelt directly."""
    if len(work) == 1 and work[0].kind == "kernel":
        w = work[0]
        return (f'{{"kind":"kernel","start_ns":{w.start_ns},"duration_ns":'
                f'{w.end_ns - w.start_ns},"device":{w.device},"stream":{w.stream},'
                f'"context":{w.context}}}')
    return _encode(gpu_object(work))


def gpu_object(work: list[GpuWork]) -> dict[str, Any]:
    """A call's `gpu` object (JSONL, chrome args): when its work started on the
    device and how long it took; a call that queued several (a graph) spans them."""
    first = min(work, key=lambda w: w.start_ns)
    obj = {"kind": first.kind, "start_ns": first.start_ns, "duration_ns": gpu_span_ns(work),
           "device": first.device, "stream": first.stream, "context": first.context}
    if first.kind != "kernel":
        obj["bytes"] = sum(w.bytes for w in work)
        if first.kind == "memcpy":
            obj["copy_kind"] = first.name
    if len(work) > 1:
        obj["count"] = len(work)
    return obj


class _File:
    """One process's file: read incrementally, its tables kept between reads."""

    def __init__(self, pid: int, path: Path | None = None, fd: int | None = None) -> None:
        self.path = path  # in the private directory: opened anew at each poll
        self.fd = fd  # or ours, kept open by whoever gave it (an attached process's memfd)
        self.offset = 0
        self.pid = pid  # the process we know wrote it, not what its header says
        self.clock_offset: int | None = None  # ns added to its timestamps; None: no header yet
        self.system_tids = True  # its API records' tids are the kernel's (joinable)
        self.names: dict[int, str] = {}
        self.name_bytes = 0
        self.functions: dict[tuple[int, int], str] = {}
        self.done = False  # found not to be the library's: never read again


# The file is written by the process traced, which may make it anything: a
# 1 TiB hole, a header that lies, names without end. It is read in chunks
# from where the last poll stopped, and what it may make us keep is bounded.
CHUNK = 4 << 20
MAX_NAME_BYTES = 16 << 20  # kernel names of one process (a real one: a few MB at most)
MAX_FUNCTIONS = 1 << 14  # CUPTI's callback ids of one process (a few thousand exist)
# gputime.<pid>.bin (a test's stand-in writes gputime.fake-<pid>.bin): the pid its records are of
_FILE_NAME = re.compile(r"^gputime\.(?:[a-z]+-)?([1-9][0-9]{0,9})\.bin$")


@dataclass
class GpuReader:
    """Reads every gputime.<pid>.bin of `directory`, and the files given with
    add_file (an attached process's memfd): what is new at each poll. With
    `keep` False (serve, which only counts) neither the work nor the API
    records are kept, so that a long run holds nothing, and none is joined."""
    directory: Path | None
    keep: bool = True
    # told of each API record as it is read (pid, correlation id, the call) where
    # nothing is kept (serve --py-stacks: analysis.gpulines joins them as they come)
    on_api: Callable[[int, int, ApiCall], None] | None = None
    work: list[GpuWork] = field(default_factory=list)  # in the order read (keep)
    seen: int = 0  # GPU records read
    statuses: dict[int, str] = field(default_factory=dict)  # pid -> why no GPU time
    dropped: int = 0  # activity records CUPTI dropped (buffers full)
    bad_files: int = 0  # files that are not the library's (cut, foreign, holed, lying)
    foreign_tids: int = 0  # processes whose CUPTI could not give the kernel's thread ids
    cupti_clock: set[int] = field(default_factory=set)  # pids stamped in CUPTI's own clock
    all_api_records: int = 0  # processes whose CUPTI recorded every call (no fine-grained switch)
    attached_all_api: int = 0  # processes attached to: their CUPTI records every call (by design)
    # where the calls are to be tied from CUPTI's callbacks (serve --py-stacks): told,
    # as its header is read, each pid whose CUPTI had none (its work joined to no call)
    on_untied: Callable[[int], None] | None = None
    _files: dict[str, _File] = field(default_factory=dict)
    _apis: dict[tuple[int, int], ApiCall] = field(default_factory=dict)  # (pid, correlation)

    def poll(self) -> list[GpuWork]:
        """Records written since the last poll; the new GPU work, its API call
        joined where its record was read too."""
        new: list[GpuWork] = []
        try:
            names = sorted(os.listdir(self.directory)) if self.directory is not None else []
        except OSError:
            names = []
        for name in names:
            named = _FILE_NAME.match(name)
            if named and name not in self._files:
                self._files[name] = _File(int(named.group(1)), path=self.directory / name)
        for f in self._files.values():
            if not f.done:
                self._read(f, new)
        self.seen += len(new)
        if self.keep:
            self.work.extend(new)
            for w in self.work:  # an API record may come in a later batch than its work
                if w.api is None:
                    w.api = self._apis.get((w.pid, w.correlation))
        return new

    def add_file(self, fd: int, pid: int) -> None:
        """The records of process `pid` in our descriptor `fd` (kept open by the caller)."""
        self._files.setdefault(f"fd:{fd}", _File(pid, fd=fd))

    def remove_file(self, fd: int) -> None:
        """The file of add_file(fd) read no more (its process gone, its records read)."""
        f = self._files.pop(f"fd:{fd}", None)
        if f is not None:
            self.statuses.pop(f.pid, None)
            self.cupti_clock.discard(f.pid)

    def offset(self, fd: int) -> int:
        """How far the file of add_file(fd) has been read (its records before are done with)."""
        f = self._files.get(f"fd:{fd}")
        return f.offset if f is not None else 0

    def _bad(self, f: _File) -> None:
        self.bad_files += 1
        f.done = True

    def _read(self, f: _File, new: list[GpuWork]) -> None:
        fd = f.fd
        if fd is None:
            try:  # a link or a FIFO put there is not followed, not waited on
                fd = os.open(f.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                return
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                self._bad(f)
                return
            while not f.done:
                try:
                    data = os.pread(fd, CHUNK, f.offset)
                except OSError:
                    return
                used = self._header(f, data) if f.clock_offset is None else 0
                if f.clock_offset is None:
                    return  # not all written yet, or not the library's
                used = self.decode(f, data, used, new)
                f.offset += used
                if len(data) < CHUNK or not used:
                    return  # all read, or a record not all written yet
        finally:
            if fd != f.fd:
                os.close(fd)

    def _header(self, f: _File, data: bytes) -> int:
        """The file's header read (bytes used), or 0: not all there yet, or not the
        library's (then done with). Its pid is not ours to trust: a directory's
        file must say the pid of its name; an attached process's is the one we know."""
        if len(data) < HEADER.size:
            return 0
        magic, version, pid, clock, record_size, offset, system_tids, api_records = \
            HEADER.unpack_from(data)
        if magic != MAGIC or version != VERSION or record_size != RECORD.size \
                or (f.path is not None and pid != f.pid):
            self._bad(f)
            return 0
        f.system_tids = bool(system_tids)
        if not system_tids:
            self.foreign_tids += 1
        if api_records == API_ALL and f.fd is None:
            self.all_api_records += 1
        elif api_records == API_ALL:
            self.attached_all_api += 1
        if self.on_untied is not None and api_records == API_NONE:
            self.on_untied(f.pid)
        f.clock_offset = offset if clock == CLOCK_REALTIME else 0
        if clock == CLOCK_REALTIME:
            self.cupti_clock.add(f.pid)
        return HEADER.size

    def decode(self, f: _File, data: bytes, pos: int, new: list[GpuWork]) -> int:
        """Whole records of `data` from `pos` on; returns where the unread tail
        begins. A record that cannot be one (a hole reads as zeros) ends the file."""
        shift = f.clock_offset or 0
        unpack, end_of_data = RECORD.unpack_from, len(data)
        while pos + RECORD.size <= end_of_data:
            (kind, size, corr, start, end, nbytes, device, context, stream, tid, cbid,
             name_id, domain, copy_kind) = unpack(data, pos)
            if size < RECORD.size:
                self._bad(f)
                return pos
            if pos + size > end_of_data:
                break  # its text is not all written yet
            text = (data[pos + RECORD.size:pos + size].rstrip(b"\0").decode("utf-8", "replace")
                    if size > RECORD.size else "")
            pos += size
            if kind in KIND_NAMES:
                name = f.names.get(name_id, "") if kind == KERNEL else \
                    COPY_KINDS.get(copy_kind, "unknown") if kind == MEMCPY else ""
                new.append(GpuWork(f.pid, KIND_NAMES[kind], start + shift, end + shift, device,
                                   context, stream, corr, name, nbytes))
            elif kind == API and f.system_tids and (self.keep or self.on_api is not None):
                # (no system tid: no row has its tid)
                api = ApiCall(tid, start + shift, end + shift, f.functions.get((domain, cbid), ""))
                if self.keep:
                    self._apis[(f.pid, corr)] = api
                else:
                    self.on_api(f.pid, corr, api)
            elif kind == NAME:
                grown = f.name_bytes + len(text) - len(f.names.get(name_id, ""))
                if grown <= MAX_NAME_BYTES:  # else unnamed: the kernel's row is kept
                    f.names[name_id], f.name_bytes = text, grown
            elif kind == FUNCTION:
                if len(f.functions) < MAX_FUNCTIONS or (domain, cbid) in f.functions:
                    f.functions[(domain, cbid)] = _VERSION_SUFFIX.sub("", text)
            elif kind == STATUS:
                self.statuses[f.pid] = text
            elif kind == DROPPED:
                self.dropped += nbytes
        return pos

    @property
    def files(self) -> int:
        """Processes that loaded the library and wrote a header."""
        return sum(1 for f in self._files.values() if f.clock_offset is not None)


@dataclass
class Joined:
    """What came of a join: records given to no call, those of an attached
    process whose call came before or after the trace's window (its CUPTI
    records from the attach to the stop, the probes a shorter span), and each
    attached process's clock shift (None: too few records agreed)."""
    unjoined: int = 0
    outside: int = 0
    shifts: dict[int, int | None] = field(default_factory=dict)


def join(calls: list[Call], work: list[GpuWork], cupti_clock: set[int] | frozenset = frozenset()
         ) -> int:
    """join_work's records given to no call, outside the window or not."""
    j = join_work(calls, work, cupti_clock)
    return j.unjoined + j.outside


def join_work(calls: list[Call], work: list[GpuWork],
              cupti_clock: set[int] | frozenset = frozenset()) -> Joined:
    """Gives each call in `calls` that queued GPU work its `gpu` list (GpuWork,
    in start order); counts the records that found no call (not traced: a
    function outside -e, a thread not followed, or its API record not read).
    The work of processes in `cupti_clock` (stamped in CUPTI's own clock: attached
    to, or a CUPTI without the timestamp callback) is aligned first (`align`)."""
    threads: dict[tuple[int, int], list[Call]] = {}
    for c in calls:
        if c.duration_ns is not None:
            threads.setdefault((c.pid, c.tid), []).append(c)
    starts: dict[tuple[int, int], list[int]] = {}
    for key, thread in threads.items():
        thread.sort(key=lambda c: c.ts_ns)
        starts[key] = [c.ts_ns for c in thread]
    out = Joined()
    slack: dict[int, int] = {}
    windows: dict[int, tuple[int, int]] = {}
    for pid in sorted(cupti_clock):
        mine = [w for w in work if w.pid == pid]
        if not mine:
            continue
        out.shifts[pid] = shift = align(mine, threads, starts)
        if shift is not None:
            slack[pid] = ALIGN_SLACK_NS
        spans = [(t[0].ts_ns, max(c.ts_ns + c.duration_ns for c in t))
                 for (p, _), t in threads.items() if p == pid]
        if spans:
            windows[pid] = (min(a for a, _ in spans), max(b for _, b in spans))
    for w in sorted(work, key=lambda w: w.start_ns):
        call = caller_of(w, threads, starts, slack.get(w.pid, 0))
        if call is None:
            window = windows.get(w.pid)
            if window is not None and w.api is not None and (
                    w.api.end_ns < window[0] or w.api.start_ns > window[1]):
                out.outside += 1
            else:
                out.unjoined += 1
        elif call.gpu is None:
            call.gpu = [w]
        else:
            call.gpu.append(w)
    return out


NESTED_SCAN = 8  # calls looked back at for the outermost one containing the API call
# align(): API records (evenly spread over the run) whose calls vote; how far
# from the header's offset a vote may be; the votes' bins; the slack the join
# then allows on each side of a call, for what one offset cannot follow
ALIGN_SAMPLE = 400
ALIGN_WINDOW_NS = 2_000_000
ALIGN_BIN_NS = 500
ALIGN_SLACK_NS = 500
ALIGN_MIN_VOTES = 20  # API records that must agree, else no shift (and no slack)
ALIGN_NEAR_MOST = 0.9


def align(work: list[GpuWork], threads: dict[tuple[int, int], list[Call]],
          starts: dict[tuple[int, int], list[int]]) -> int | None:
    """The ns to add to one process's CUPTI timestamps (its work's and API
    records') so that its API records fall inside the calls that made them;
    added here. Each sampled API record votes for the offset to every traced
    call of its thread and function within ALIGN_WINDOW_NS (midpoint to
    midpoint): the offset of the true pairs is the one nearly all agree on,
    where a loop's other calls spread theirs over its varying periods. None
    (nothing moved) where fewer than ALIGN_MIN_VOTES records agree."""
    apis = {id(w.api): w.api for w in work if w.api is not None}
    records = sorted(apis.values(), key=lambda a: a.start_ns)
    if not records:
        return None
    # a sample spread at random (seeded: the same records, the same offset): a
    # stride would take one call of each pair in a loop that alternates two
    # (every 2nd record of heavy(), light(), heavy() ...), whose own record sits
    # apart from its call's midpoint and votes as well for the other's call
    sample = records if len(records) <= ALIGN_SAMPLE else \
        [records[i] for i in sorted(random.Random(len(records)).sample(range(len(records)),
                                                                       ALIGN_SAMPLE))]
    votes: list[tuple[int, int]] = []  # (offset, sample index)
    for n, a in enumerate(sample):
        key = (work[0].pid, a.tid)
        thread = threads.get(key)
        if thread is None:
            continue
        mid2 = a.start_ns + a.end_ns  # twice the midpoint, to stay in integers
        first = bisect.bisect_left(starts[key], a.start_ns - ALIGN_WINDOW_NS)
        last = bisect.bisect_right(starts[key], a.end_ns + ALIGN_WINDOW_NS)
        for c in thread[first:last]:
            if not a.function or c.event == a.function:
                votes.append(((2 * c.ts_ns + c.duration_ns - mid2) // 2, n))
    if not votes:
        return None
    bins: dict[int, set[int]] = {}
    for offset, n in votes:
        bins.setdefault(offset // ALIGN_BIN_NS, set()).add(n)
    # a bin's voters with its two neighbours' (the true offset's may straddle a
    # border); of the bins nearly as agreed on as the most (a loop as regular as a
    # clock agrees as well on its period), the nearest the header's offset
    voters = {b: len(bins[b].union(bins.get(b - 1, ()), bins.get(b + 1, ()))) for b in bins}
    most = max(voters.values())
    best = min((b for b, v in voters.items() if v >= most * ALIGN_NEAR_MOST),
               key=lambda b: (abs(b), b))
    if voters[best] < ALIGN_MIN_VOTES:
        return None
    agreeing = sorted(o for o, _ in votes if abs(o // ALIGN_BIN_NS - best) <= 1)
    shift = agreeing[len(agreeing) // 2]
    for w in work:
        w.start_ns += shift
        w.end_ns += shift
    for a in records:
        a.start_ns += shift
        a.end_ns += shift
    return shift


def say_shifts(shifts: dict[int, int | None], notify: Callable[[str], None]) -> None:
    """A line per process whose CUPTI clock was aligned (or could not be)."""
    for pid, shift in sorted(shifts.items()):
        if shift is None:
            notify(f"--gpu-time: pid {pid}'s GPU timestamps could not be aligned with its "
                   "rows (too few of CUPTI's API records met a traced call): its work is "
                   "joined by the clock offset read at the attach, and may go unjoined")
        else:
            notify(f"--gpu-time: pid {pid}'s GPU timestamps moved by {shift / 1000:+.1f} µs "
                   "onto the rows' clock (CUPTI's own clock, aligned by its API records)")


def caller_of(w: GpuWork, threads: dict[tuple[int, int], list[Call]],
            starts: dict[tuple[int, int], list[int]], slack: int = 0) -> Call | None:
    api = w.api
    if api is None:
        return None
    key = (w.pid, api.tid)
    thread = threads.get(key)
    if thread is None:
        return None
    i = bisect.bisect_right(starts[key], api.start_ns + slack)
    found = None
    for c in reversed(thread[max(0, i - NESTED_SCAN):i]):
        if c.ts_ns + c.duration_ns + slack >= api.end_ns:
            found = c  # keep looking: an outer call started earlier
    if found is None and i < len(thread):
        # the API call itself was not traced (the runtime that cuBLAS links in
        # statically has no symbols): the first traced call made inside it, the
        # driver call that queued the work (cuLaunchKernelEx under cudaLaunchKernelExC)
        c = thread[i]
        if c.ts_ns + c.duration_ns <= api.end_ns + slack:
            found = c
    return found
