"""serve --gpu-time --py-stacks: each kernel's GPU time under the Python line
of the launch that queued it, joined while serve runs.

`stats --by line` holds every call until the command has exited, then joins
the GPU records to them (decode.gputime.join_work). serve runs for weeks and
holds nothing, so `LineJoin` keeps only what a join needs, and only briefly:

- the traced launches (calls of the `kernel` category) of each thread, until
  the decoder is KEEP_NS past them: CUPTI hands its records over at least
  every half second, and the decoder may run behind on a busy node;
- what each of CUPTI's API records of a launch came to, as it is read (`api`):
  the outermost kept launch of its thread whose interval holds it, as
  join_work does (decode.gputime.caller_of), or none; its correlation id then
  names that launch for the kernels it queued (`launch_of`). A kernel read
  before its API record waits for it.

An API record newer than its thread's launches decoded so far waits for the
decoder (until it is ORDER_NS past the record in every thread, or idle for
PENDING_NS); one of a process stamped in CUPTI's own clock (a process the
library went into after its CUPTI started) waits until enough of them agree
on the offset to the probes' clock (decode.gputime.align): only records whose
thread's launches are decoded vote (the decoder runs behind on a busy node,
and a record with nothing to vote for would decide nothing). With --duty, the
probes are on in slices (the metrics' SliceSpans, given at `slices_only`: from once they
are in to the slice's length later, or to before they come out where that
is sooner, as a call counts) and an API record outside them (in the probes'
clock: a process in CUPTI's own clock is placed once aligned) has no
traced launch: its kernels count by no line (OUTSIDE), where they count by
kernel name all the same (CUPTI records all along). Every
bound is a count: a flood costs memory up to the MAX_* below, never more,
and what was let go is counted (`dropped`).
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Callable, Collection
from copy import copy

from cudaprobe.analysis.by_line import gpu_line_of
from cudaprobe.analysis.slices import SliceSpans
from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import (
    ALIGN_MIN_VOTES,
    ALIGN_SAMPLE,
    ALIGN_SLACK_NS,
    ALIGN_WINDOW_NS,
    ApiCall,
    GpuWork,
    align,
    caller_of,
)

KEEP_NS = 10_000_000_000  # a launch kept until the decoder is this far past its end
PENDING_NS = 2_000_000_000  # the decoder idle this long: a record newer finds no launch
MAX_KEPT = 500_000  # launches kept, every thread together
MAX_PENDING = 300_000  # API records waiting for the decoder
MAX_UNALIGNED = 4 * ALIGN_SAMPLE  # API records of one process waiting for its clock offset
MAX_CORRELATIONS = 500_000  # API records' outcomes kept for their kernels (the oldest go)
MAX_WAITING = 200_000  # kernels read before their API record, waiting for it
ORDER_NS = 1_000_000_000  # how far one thread's calls may come behind another's, decoded
WAIT_NS = 5_000_000_000  # the decoder this far past a kernel's start: its record will not come


_UNKNOWN = object()  # no outcome yet
# launch_of: the kernel's API record was made between --duty's slices (no launch
# of it was traced, nor is its kernel counted); WAITING: its API record is not
# read (or joined) yet, settle() gives the kernel once it is
OUTSIDE = object()
WAITING = object()


def _rank(outcome: object) -> int:
    """Which of two outcomes for one correlation id stands: a launch, then none
    in a slice, then OUTSIDE."""
    return 2 if isinstance(outcome, Launch) else 0 if outcome is OUTSIDE else 1


class Launch:
    """A traced launch, as a join needs it (decode.gputime.caller_of and align
    read ts_ns, duration_ns and event), and what its kernels count under: no
    more (a busy thread's launches of 10 s are many)."""

    __slots__ = ("ts_ns", "duration_ns", "event", "line", "weight", "process")

    def __init__(self, call: Call, weight: float, process: tuple[str, ...]) -> None:
        self.ts_ns = call.ts_ns
        self.duration_ns = call.duration_ns or 0
        self.event = call.event
        self.line = gpu_line_of(call)[0]  # its kernels' line: the forward op's, backward
        self.weight = weight  # what one traced launch stands for (serve --duty)
        self.process = process  # the process's labels when it was traced

    @property
    def end_ns(self) -> int:
        return self.ts_ns + self.duration_ns


class LineJoin:
    """`launch()` each traced launch, `api()` each API record as read,
    `launch_of(work)` for each kernel, `settle(now_ns)` after each read."""

    def __init__(self, cupti_clock: Collection[int] = frozenset()) -> None:
        # pids whose records are stamped in CUPTI's own clock (GpuReader.cupti_clock,
        # filled as their headers are read)
        self.cupti_clock = cupti_clock
        self._threads: dict[tuple[int, int], list[Launch]] = {}
        self._starts: dict[tuple[int, int], list[int]] = {}
        self._kept = 0
        self._newest = 0  # the latest end of a launch given
        # pid -> ns added to its CUPTI timestamps (aligned: its join's slack is
        # ALIGN_SLACK_NS, as join_work gives it)
        self._shift: dict[int, int] = {}
        self.on_aligned: Callable[[int, int], None] | None = None  # told (pid, shift) once
        self._unaligned: dict[int, list[tuple[int, ApiCall]]] = {}
        self._pending: list[tuple[int, int, ApiCall]] = []
        # (pid, correlation) -> what its API record came to: the launch, or None
        self._outcomes: OrderedDict[tuple[int, int], Launch | None] = OrderedDict()
        # kernels read before their API record was: (the clock at the settle before, them)
        self._waiting: dict[tuple[int, int], tuple[int, list[GpuWork]]] = {}
        self._waiting_kernels = 0
        self._ready: list[tuple[GpuWork, Launch]] = []  # joined since the last settle
        self._now_ns = 0  # the clock at the last settle
        self._seen_newest = 0
        self._moved_ns: int | None = None  # when the decoder last moved on
        self._spans: SliceSpans | None = None  # --duty: the slices (the metrics')
        self.dropped = 0  # records, kernels or launches let go at a bound
        self.unjoined = 0  # API records of a traced span that found no launch
        self.no_record = 0  # kernels whose API record never came

    # --- what the probes traced ------------------------------------------------
    def launch(self, call: Call, weight: float, process: tuple[str, ...]) -> None:
        key = (call.pid, call.tid)
        launch = Launch(call, weight, process)
        thread = self._threads.get(key)
        if thread is None:
            thread = self._threads[key] = []
            self._starts[key] = []
        starts = self._starts[key]
        if starts and launch.ts_ns < starts[-1]:  # (rows come in call order: rarely)
            i = bisect.bisect_right(starts, launch.ts_ns)
            starts.insert(i, launch.ts_ns)
            thread.insert(i, launch)
        else:
            starts.append(launch.ts_ns)
            thread.append(launch)
        self._kept += 1
        self._newest = max(self._newest, launch.end_ns)

    def slices_only(self, spans: SliceSpans) -> None:
        """--duty: from now on only records inside one of `spans` (none yet, the
        metrics' own, told as the slices go) are looked at."""
        if self._spans is None:
            self._spans = spans

    # --- CUPTI's records ---------------------------------------------------------
    def api(self, pid: int, correlation: int, api: ApiCall) -> None:
        """One API record, as read (GpuReader.on_api): joined now, or kept to be."""
        if api.function and "Launch" not in api.function:
            return  # queues no kernel (copies and memsets are not counted by line)
        key = (pid, correlation)
        if pid in self.cupti_clock and pid not in self._shift:
            waiting = self._unaligned.setdefault(pid, [])
            if len(waiting) >= MAX_UNALIGNED:
                # the oldest are kept: they vote first, as the decoder (seconds behind
                # CUPTI on a busy node) reaches their launches; this one is let go
                self.dropped += 1
                self._resolve(key, None)
                return
            waiting.append((correlation, api))
            return
        shift = self._shift.get(pid, 0)
        if shift:
            api.start_ns += shift
            api.end_ns += shift
        self._place(pid, correlation, api)

    def _place(self, pid: int, correlation: int, api: ApiCall) -> None:
        """A record in the probes' clock: joined, unless it was made outside every
        slice (no launch of it was traced, and its kernels are not counted)."""
        if self._spans is not None and not self._in_span(api):
            self._resolve((pid, correlation), OUTSIDE)
            return
        self._join(pid, correlation, api)

    def _in_span(self, api: ApiCall) -> bool:
        """The call began in a slice (within the alignment's slack), as a call
        counts: the probes were in at its entry, and it was not made while
        they went in or came out, so its kernels count at 1/fraction."""
        spans = self._spans
        return spans is not None and (api.start_ns + ALIGN_SLACK_NS in spans or
                                      api.start_ns - ALIGN_SLACK_NS in spans)

    def _join(self, pid: int, correlation: int, api: ApiCall) -> None:
        work = GpuWork(pid, "kernel", 0, 0, 0, 0, 0, correlation, api=api)
        slack = ALIGN_SLACK_NS if pid in self._shift else 0
        found = caller_of(work, self._threads, self._starts, slack)
        if found is not None:
            self._resolve((pid, correlation), found)
        elif not self._decoded(pid, api):  # its launch may not be decoded yet
            if len(self._pending) >= MAX_PENDING:
                self.dropped += 1
                self._resolve((pid, correlation), None)
                return
            self._pending.append((pid, correlation, api))
        else:
            self._no_launch(pid, correlation)

    def _no_launch(self, pid: int, correlation: int) -> None:
        """The record (in a slice, where there are slices) found no traced launch,
        its thread's decoded past it: unjoined."""
        self.unjoined += 1
        self._resolve((pid, correlation), None)

    def _decoded(self, pid: int, api: ApiCall, margin_ns: int = 0) -> bool:
        """Whether every launch of the record's thread up to its end (and `margin_ns`
        past it) is decoded: its thread's launches are past it, or every thread's
        are ORDER_NS past it (the decoder gives each thread's calls in order, not
        the threads' in time order)."""
        end = api.end_ns + margin_ns
        thread = self._threads.get((pid, api.tid))
        return (thread is not None and thread[-1].end_ns >= end) or end <= self._newest - ORDER_NS

    def _resolve(self, key: tuple[int, int], launch: Launch | object | None) -> None:
        """What an API record came to: its launch, none (in a slice, or with no
        --duty), or OUTSIDE every slice; the kernels that waited for it are
        ready to count (but those of OUTSIDE)."""
        outcomes = self._outcomes
        known = outcomes.get(key, _UNKNOWN)
        if known is not _UNKNOWN and _rank(launch) <= _rank(known):
            return  # a runtime record and the driver record inside it share the id
        outcomes[key] = launch
        if len(outcomes) > MAX_CORRELATIONS:
            outcomes.popitem(last=False)  # the oldest: their kernels came long ago
        works = self._waiting.pop(key, None)
        if works is not None:
            self._waiting_kernels -= len(works[1])
            if launch is not OUTSIDE:
                self._ready.extend((w, launch) for w in works[1])

    def launch_of(self, work: GpuWork) -> Launch | object | None:
        """The traced launch that queued this kernel; None: none was traced;
        OUTSIDE: it was launched between slices; WAITING: its API record is not
        read or joined yet: then it waits for it (given by a later settle()),
        until the decoder is WAIT_NS past it."""
        key = (work.pid, work.correlation)
        found = self._outcomes.get(key, _UNKNOWN)
        if found is not _UNKNOWN:
            return found
        if self._waiting_kernels >= MAX_WAITING:
            self.dropped += 1
            return None
        entry = self._waiting.get(key)
        if entry is None:
            entry = self._waiting[key] = (self._now_ns, [])
        entry[1].append(work)
        self._waiting_kernels += 1
        return WAITING

    def settle(self, now_ns: int) -> list[tuple[GpuWork, Launch | None]]:
        """After each read: the processes whose clock offset can now be told; the
        API records the decoder has reached since (or, the decoder idle for
        PENDING_NS, that no launch will come for); the kernels that waited and
        whose record is now known, with their launch or None (returned: to be
        counted); what is too old to join anything forgotten."""
        self._now_ns = now_ns
        if self._newest != self._seen_newest or self._moved_ns is None:
            self._seen_newest, self._moved_ns = self._newest, now_ns
        idle = now_ns - self._moved_ns >= PENDING_NS
        for pid in list(self._unaligned):
            self._align(pid)
        pending, self._pending = self._pending, []
        for pid, correlation, api in pending:
            if self._decoded(pid, api):
                self._join(pid, correlation, api)
            elif not idle:
                self._pending.append((pid, correlation, api))
            else:
                self._no_launch(pid, correlation)
        # kernels whose launch the decoder is WAIT_NS past (or, idle, that came
        # PENDING_NS ago) with no API record read for them: none will come
        passed = self._newest - WAIT_NS
        for key in [k for k, (since, works) in self._waiting.items()
                    if works[0].start_ns < passed or (idle and now_ns - since >= PENDING_NS)]:
            works = self._waiting.pop(key)[1]
            self._waiting_kernels -= len(works)
            self.no_record += len(works)
        ready, self._ready = self._ready, []
        self._forget(self._newest - KEEP_NS)
        return ready

    def _align(self, pid: int) -> None:
        """The process's clock offset, once enough of its records whose launches
        are decoded agree on it (decode.gputime.align); then every record of it
        joined. Records newer than their thread's launches decoded (the decoder
        runs behind on a busy node) neither vote nor decide how to: they wait."""
        waiting = self._unaligned[pid]
        decoded = [(c, a) for c, a in waiting if self._decoded(pid, a, ALIGN_WINDOW_NS)]
        if len(decoded) < ALIGN_MIN_VOTES:
            return
        threads = {k: t for k, t in self._threads.items() if k[0] == pid}
        starts = {k: self._starts[k] for k in threads}
        voters = [GpuWork(pid, "kernel", 0, 0, 0, 0, 0, c, api=copy(a)) for c, a in decoded]
        shift = align(voters, threads, starts)
        if shift is None:
            events = {launch.event for thread in threads.values() for launch in thread}
            if not any(a.function in events for _, a in decoded):
                # no record of a function traced (runtime records, driver probes): each
                # votes for the launches near it whatever their function
                for w in voters:
                    w.api.function = ""
                shift = align(voters, threads, starts)
        if shift is None:
            if len(decoded) == len(waiting) == MAX_UNALIGNED:
                # every one decoded and still too few agree: the older half makes
                # room for later records (a later run of launches may agree)
                for correlation, _ in waiting[: MAX_UNALIGNED // 2]:
                    self._resolve((pid, correlation), None)
                del waiting[: MAX_UNALIGNED // 2]
                self.dropped += MAX_UNALIGNED // 2
            return  # too few agree yet: more records, or more launches, may
        self._shift[pid] = shift
        if self.on_aligned is not None:
            self.on_aligned(pid, shift)
        del self._unaligned[pid]
        for correlation, api in waiting:
            api.start_ns += shift
            api.end_ns += shift
            self._place(pid, correlation, api)

    def _forget(self, before_ns: int) -> None:
        """Launches ended before `before_ns` (KEEP_NS behind the decoder: a decoder
        running behind keeps what its records will want)."""
        flood = self._kept > MAX_KEPT
        if flood:  # the window shrinks to what fits: the launches let go are counted
            ends = sorted(launch.end_ns for t in self._threads.values() for launch in t)
            before_ns = max(before_ns, ends[self._kept - MAX_KEPT // 2])
            kept = self._kept
        for key in list(self._threads):
            thread, starts = self._threads[key], self._starts[key]
            i = 0
            while i < len(thread) and thread[i].end_ns < before_ns:
                i += 1
            if i:
                del thread[:i], starts[:i]
                self._kept -= i
            if not thread:
                del self._threads[key], self._starts[key]
        if flood:
            self.dropped += kept - self._kept
        for pid in [p for p in self._unaligned if p not in self.cupti_clock]:
            del self._unaligned[pid]  # its file read no more (its process gone)
        for pid in [p for p in self._shift if p not in self.cupti_clock]:
            del self._shift[pid]
