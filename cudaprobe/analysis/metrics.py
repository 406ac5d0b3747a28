"""What a stream of completed calls counts, for any metrics exporter.

`CallMetrics` is fed decoded Calls (through `MetricsSink`, a Reporter that a
TraceSession drives) and the tracer's loss counters; exporters read
`snapshot()`, a consistent copy taken under one lock, from their own thread
(a Prometheus scrape, an OpenTelemetry periodic reader). It knows nothing of
any exporter's types; an exporter only names and labels what it holds:

- `calls[(function, api, process, *job)]`: completed calls (in-flight ones at
  the end are not counted: they have no result). `job`: the process's
  targets.jobs.JOB_LABELS values (its pod, container, Slurm job, rank; ""
  each where it has none, and all of them without a `jobs` given).
- `errors[(function, error, process, *job)]`: calls that returned non-zero, by
  result name (`cudaErrorMemoryAllocation`, `CUDA_ERROR_OUT_OF_MEMORY`).
- `latency[(function, api)]`: a `Histogram` of call durations: `counts[i]`
  calls with duration <= `LATENCY_BOUNDS_S[i]` and above the bound before it,
  the last one above every bound (OTLP's explicit-bucket layout; Prometheus
  wants the running sum), plus the sum (`sum_ns`, exact; `sum_s`) and the count.
- `memcpy_bytes[(kind, api)]`: bytes copied by successful copies, by direction
  (`HostToDevice`, `DeviceToHost`, `DeviceToDevice`, `HostToHost`, `Default`:
  the direction inferred by unified addressing, cudaMemcpyDefault or cuMemcpy).
  A runtime copy is carried out by driver copies: with both APIs probed, sum
  one api, not both.
- `memset_bytes[api]`: bytes set by successful memsets.
- `live_bytes[(process, *job, kind)]`: memory allocated and not yet freed, by
  process and memtrack kind (device, host-pinned, managed, async-pool, vmm,
  host-registered: memstate.KINDS),
  counted once across the two APIs as `cudaprobe memory` counts it
  (memtrack.py); it lags by memtrack.HOLD_NS, and a process's entries go when it exits.
- `kernel_launches[(kernel, api)]`: completed launches by kernel name (whole,
  demangled), for the `MAX_KERNELS` kernels launched most lately, and `other`
  for the rest and for launches of unknown name.
- `lost[cause]`: events lost, as the summary counts them (never scaled).
- With serve --duty, the probes are on for a slice of each period: every
  count above (calls, errors, latency buckets and sum, launches, bytes) is
  what was seen times `weight` (the period over the slice: an estimate),
  `sampling_ratio` says the fraction, `sampled_windows` the slices so far;
  live memory is not kept (a free seen without its allocation, or the
  reverse, says nothing), nor GPU time scaled (CUPTI's is whole).
- `gpu_time[kernel]` (serve --gpu-time): a `Histogram` of kernels' GPU
  durations (CUPTI, decode.gputime), by demangled name: the `MAX_KERNELS`
  kernels with the most GPU time lately, and `other` for the rest.
- `gpu_lines[(line, process, *job)]` (serve --gpu-time --py-stacks,
  `python_lines()`): seconds of kernels' GPU time by the Python line of the
  launch that queued them (analysis.by_line.gpu_line_of: backward work on
  its forward op's line), joined as they come (analysis.gpulines): for each
  process label the `MAX_LINES` lines with the most GPU time lately, the
  rest as `other`. Only launches traced are joined: with --duty, each
  kernel stands for `weight` (an estimate, like the counts).

Every counter is cumulative since the start. Labels are bounded: `function`
is the symbol as called (catalogue data, as trace's EVENT column), `error` a
result name, `kind` a fixed set, and `process` the calling thread's comm, for
the `MAX_PROCESSES` names (with their job labels) making the most calls
lately, the rest counted as `other` (with no job labels). Names a process
chose are ranked by what they do, again at each snapshot, never first come
(labels.py says how, and how every series still only grows). No pointers,
pids or tids.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Callable, Protocol

from cudaprobe.analysis.gpulines import OUTSIDE, WAITING, Launch, LineJoin
from cudaprobe.analysis.labels import LabelBudget
from cudaprobe.analysis.memstate import KINDS
from cudaprobe.analysis.memtrack import ROLES, MemCall, MemoryAccounting
from cudaprobe.analysis.slices import SliceSpans
from cudaprobe.analysis.summary import NOT_LOST
from cudaprobe.catalogue.functions import BY_EXPORTED
from cudaprobe.decode.calls import Call
from cudaprobe.decode.demangle import demangle
from cudaprobe.decode.gputime import GpuWork
from cudaprobe.decode.handles import NAME_KEY
from cudaprobe.targets.injectable import refusal_reason
from cudaprobe.targets.jobs import NO_JOB
from cudaprobe.targets.procmaps import process_alive

# 1 µs (cudaGetDevice) to 10 s (a synchronize waiting on a long kernel)
LATENCY_BOUNDS_S = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
                    5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_BOUNDS_NS = tuple(round(b * 1e9) for b in LATENCY_BOUNDS_S)
MAX_PROCESSES = 64  # process label values besides `other`
MAX_PROCESS_NAMES = 4096  # names whose rates are kept for the ranking
MAX_KERNELS = 50  # kernel label values besides `other`
MAX_KERNEL_NAMES = 10_000  # names whose rates are kept for the ranking
MAX_LINES = 10  # Python line label values of each process label, besides `other`
MAX_LINE_NAMES = 1000  # lines of each process label whose rates are kept for the ranking
EXIT_CHECK_NS = 1_000_000_000  # how often, at most, fed calls look for exited processes
OTHER_PROCESS = ("other", *NO_JOB)  # the process labels of the rest
# a process's job labels are kept this long after it is taken as exited (below)
JOB_GRACE_NS = 10_000_000_000
# A process seen gone is taken as exited (what it held let go, its job labels then
# kept JOB_GRACE_NS) only once every call it made has been fed: once the calls fed
# have come EXIT_SLACK_NS past the moment it was seen gone (its calls all ended
# before its exit; on a busy node the decoder runs seconds behind them), or once
# nothing has been fed for IDLE_NS (nothing waits to be decoded)
EXIT_SLACK_NS = 100_000_000
IDLE_NS = 1_000_000_000


class JobSource(Protocol):
    """targets.jobs.Jobs: a process's job labels, read once; forgotten at its exit."""

    def of(self, pid: int) -> tuple[str, ...]: ...

    def forget(self, pid: int) -> None: ...

# catalogue name -> (arguments whose product is the byte count, the direction: a
# memcpy kind name, or the argument holding it)
COPIES: dict[str, tuple[tuple[str, ...], str]] = {
    "cudaMemcpy": (("count",), "kind"),
    "cudaMemcpyAsync": (("count",), "kind"),
    "cudaMemcpy2D": (("width", "height"), "kind"),
    "cudaMemcpy2DAsync": (("width", "height"), "kind"),
    "cudaMemcpyPeer": (("count",), "DeviceToDevice"),
    "cudaMemcpyPeerAsync": (("count",), "DeviceToDevice"),
    "cuMemcpy": (("ByteCount",), "Default"),
    "cuMemcpyAsync": (("ByteCount",), "Default"),
    "cuMemcpyHtoD": (("ByteCount",), "HostToDevice"),
    "cuMemcpyHtoDAsync": (("ByteCount",), "HostToDevice"),
    "cuMemcpyDtoH": (("ByteCount",), "DeviceToHost"),
    "cuMemcpyDtoHAsync": (("ByteCount",), "DeviceToHost"),
    "cuMemcpyDtoD": (("ByteCount",), "DeviceToDevice"),
    "cuMemcpyDtoDAsync": (("ByteCount",), "DeviceToDevice"),
}
# catalogue name -> (the element count argument, bytes per element)
MEMSETS: dict[str, tuple[str, int]] = {
    "cudaMemset": ("count", 1),
    "cudaMemsetAsync": ("count", 1),
    "cuMemsetD8": ("N", 1),
    "cuMemsetD8Async": ("N", 1),
    "cuMemsetD16": ("N", 2),
    "cuMemsetD16Async": ("N", 2),
    "cuMemsetD32": ("N", 4),
    "cuMemsetD32Async": ("N", 4),
}


def _copy(name: str, args: dict) -> tuple[str, int] | None:
    copy = COPIES.get(name)
    if copy is None:
        return None
    sizes, kind = copy
    n = 1
    for arg in sizes:
        n *= int(args.get(arg) or 0)
    return args.get(kind, kind), n


def copy_of(call: Call) -> tuple[str, int] | None:
    """A copy's direction and bytes, as `memcpy_bytes` counts them; None for a
    call that is not a copy."""
    function = BY_EXPORTED.get(call.event)
    return _copy(function.name, call.args) if function is not None else None


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(_BOUNDS_NS) + 1))
    sum_ns: int = 0  # exact: a float sum of microseconds drifts over a long run
    count: int = 0

    @property
    def sum_s(self) -> float:
        return self.sum_ns / 1e9

    def copy(self) -> Histogram:
        return Histogram(list(self.counts), self.sum_ns, self.count)

    def add(self, ns: int, weight: float = 1) -> None:
        self.counts[bisect.bisect_left(_BOUNDS_NS, ns)] += weight
        self.sum_ns += ns * weight
        self.count += weight


@dataclass
class Snapshot:
    calls: dict[tuple[str, ...], int]
    errors: dict[tuple[str, ...], int]
    latency: dict[tuple[str, str], Histogram]
    memcpy_bytes: dict[tuple[str, str], int]
    memset_bytes: dict[str, int]
    live_bytes: dict[tuple[str, ...], int]
    lost: dict[str, int]
    kernel_launches: dict[tuple[str, str], int] = field(default_factory=dict)
    gpu_time: dict[str, Histogram] = field(default_factory=dict)
    # serve --duty: the fraction of the time traced (1: exact counting), and the
    # slices traced so far
    sampling_ratio: float = 1.0
    sampled_windows: int = 0
    # serve --duty: the scaled totals' relative standard error, from the spread of
    # what the slices saw ("calls" of the sampled functions), once two slices are
    # complete
    sampling_relative_error: dict[str, float] = field(default_factory=dict)
    # --gpu-time into running processes (serve): processes the library went into,
    # and those it could not, by reason; None: not asked for
    gpu_time_processes: int | None = None
    gpu_time_refusals: dict[str, int] = field(default_factory=dict)
    # serve --gpu-time --py-stacks: GPU seconds by line; what got no line, by
    # reason: API records of launches in a traced span that found no traced launch,
    # what was let go at a bound, kernels whose API record never came (None: not
    # asked for)
    gpu_lines: dict[tuple[str, ...], float] = field(default_factory=dict)
    gpu_lines_unjoined: dict[str, int] | None = None


class SliceTotals:
    """What each slice counted, unscaled (serve --duty), each call in the slice
    of its entry, not of its arrival: a busy node's decoder runs seconds
    behind; counted as they came, one slice took several slices' calls and
    the next none. A slice is closed once a later
    slice has been counted in (the records come in order, so its own are in)
    and it is SETTLE_NS old, or at the latest SETTLE_MAX_NS after it began. A
    scaled total is the slices' sum over the fraction: its relative standard
    error is the spread of the closed slices' totals over their mean, over
    the square root of their number (each period's slice a random draw of
    it)."""

    SETTLE_NS = 1_000_000_000
    SETTLE_MAX_NS = 60_000_000_000
    SLACK_NS = 50_000_000  # a call made as the probes went in, before the slice was told
    OPEN_MAX = 256  # slices open at once, at most (the oldest closed first)

    def __init__(self) -> None:
        self._starts: list[int] = []  # the open slices' starts, in order
        self._totals: list[float] = []
        self._first = 0  # the number of the first open slice (slices counted from 0)
        self._fed = -1  # the number of the latest slice counted in
        self._n, self._mean, self._m2 = 0, 0.0, 0.0  # closed slices (Welford)

    def begin(self, at_ns: int) -> None:
        """A slice begins at `at_ns`; those whose records are in are closed."""
        starts, totals = self._starts, self._totals
        while starts and (len(starts) >= self.OPEN_MAX
                          or starts[0] <= at_ns - self.SETTLE_MAX_NS
                          or (self._first < self._fed and starts[0] <= at_ns - self.SETTLE_NS)):
            del starts[0]
            self._first += 1
            self._close(totals.pop(0))
        starts.append(at_ns)
        totals.append(0.0)

    def add(self, x: float, at_ns: int) -> None:
        """`x` counted at `at_ns`, in the last slice begun by then (none open:
        before the first, or long closed: not in the spread)."""
        starts = self._starts
        if not starts:
            return
        if at_ns + self.SLACK_NS >= starts[-1]:
            i = len(starts) - 1
        else:
            i = bisect.bisect_right(starts, at_ns + self.SLACK_NS) - 1
            if i < 0:
                return
        self._totals[i] += x
        if self._first + i > self._fed:
            self._fed = self._first + i

    def _close(self, total: float) -> None:
        self._n += 1
        delta = total - self._mean
        self._mean += delta / self._n
        self._m2 += delta * (total - self._mean)

    def relative_error(self) -> float | None:
        """None before two slices are closed, or while they saw nothing."""
        if self._n < 2 or self._mean <= 0:
            return None
        return math.sqrt(self._m2 / (self._n - 1)) / self._mean / math.sqrt(self._n)


class CallMetrics:
    """Feed with `add(calls)` and `set_lost(counters)`; read with `snapshot()`.

    `alive(pid)` says whether a process still runs (its live bytes go when not);
    `jobs`, where given, labels each process with its job (serve)."""

    def __init__(self, max_processes: int = MAX_PROCESSES,
                 alive: Callable[[int], bool] = process_alive,
                 jobs: JobSource | None = None,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        """`clock`: CLOCK_MONOTONIC ns, the calls' clock (a test's own)."""
        self.max_processes = max_processes
        self.alive = alive
        self.clock = clock
        self._seen_gone: dict[int, int] = {}  # pid -> clock() when first seen gone
        self.jobs = jobs
        # processes whose job labels `jobs` keeps -> when seen gone (None: running)
        self._job_pids: dict[int, int | None] = {}
        self._lock = threading.Lock()
        self._processes = LabelBudget(max_processes, max(MAX_PROCESS_NAMES, 2 * max_processes),
                                      other=OTHER_PROCESS)
        self._calls: dict[tuple[str, ...], int] = {}
        self._errors: dict[tuple[str, ...], int] = {}
        self._latency: dict[tuple[str, str], Histogram] = {}
        self._memcpy: dict[tuple[str, str], int] = {}
        self._memset: dict[str, int] = {}
        self._lost: dict[str, int] = {}
        self._polled: float | None = None  # monotonic time of the last set_lost
        self._kernels = LabelBudget(MAX_KERNELS, MAX_KERNEL_NAMES)  # by launches
        self._launches: dict[tuple[str, str], int] = {}
        self._gpu_kernels = LabelBudget(MAX_KERNELS, MAX_KERNEL_NAMES)  # by GPU time
        self._gpu_time: dict[str, Histogram] = {}
        # serve --duty: each slice's calls of the sampled functions
        self._slice_calls = SliceTotals()
        self.spans = SliceSpans()  # serve --duty: when the slices counted
        self._memory = MemoryAccounting()
        self._progress = self._memory.progress  # fed with every call read, not only memory's
        self._next_exit_check = 0
        # serve --duty: each call counted observed is this many (the period over
        # the slice traced), and the slices traced so far; 1 and 0: exact counting
        self.weight: float = 1
        self.windows = 0
        # ... but the calls of these exported functions, traced all the time (exact())
        self._exact: frozenset[str] = frozenset()
        # --gpu-time into running processes (gpu_injection()): the processes recording,
        # and the refusals by reason (targets.injectable.REFUSAL_REASONS)
        self._gpu_processes: int | None = None
        self._gpu_refusals: dict[str, int] = {}
        # --py-stacks (python_lines()): the join of GPU work to launches, and each
        # process label's lines (a LabelBudget each) and GPU ns by line
        self._lines: LineJoin | None = None
        self._line_budgets: dict[tuple[str, ...], LabelBudget] = {}
        self._gpu_lines: dict[tuple[str, ...], float] = {}

    def python_lines(self) -> LineJoin:
        """serve --gpu-time --py-stacks: kernels' GPU time counted by Python line;
        the join, to be given each API record as read (GpuTimeRows)."""
        with self._lock:
            self._lines = self._lines or LineJoin()
            return self._lines

    def exact(self, names: frozenset[str]) -> None:
        """serve --duty: the functions (catalogue names) traced all the time,
        each call counted once (weight 1) and their live memory kept."""
        with self._lock:
            self._exact = frozenset(sym for sym, f in BY_EXPORTED.items() if f.name in names)

    def gpu_injection(self) -> None:
        """The GPU-time library is to go into processes: its outcomes are exported."""
        with self._lock:
            self._gpu_processes = self._gpu_processes or 0

    def gpu_recording(self, _pid: int) -> None:
        with self._lock:
            self._gpu_processes = (self._gpu_processes or 0) + 1

    def gpu_refused(self, _pid: int, why: str) -> None:
        reason = refusal_reason(why)
        with self._lock:
            self._gpu_refusals[reason] = self._gpu_refusals.get(reason, 0) + 1

    def add(self, calls: Iterable[Call]) -> None:
        memory, last_ns = [], 0
        with self._lock:
            weight, exact, lines = self.weight, self._exact, self._lines
            slice_calls, spans = self._slice_calls, self.spans
            for c in calls:
                if c.duration_ns is None:
                    continue
                last_ns = max(last_ns, c.ts_ns + c.duration_ns)
                w = 1 if weight == 1 or c.event in exact else weight
                who = self._process_key(c.pid, c.process)
                if w != 1:
                    if c.ts_ns not in spans:  # traced as the probes went in or came out
                        if lines is not None and c.category == "kernel":
                            lines.launch(c, w, who)  # (its kernels: outside the slices)
                        continue
                    slice_calls.add(1, c.ts_ns)
                process = self._processes.label(who, w)
                key = (c.event, c.api, *process)
                self._calls[key] = self._calls.get(key, 0) + w
                if c.ret:
                    err = (c.event, c.ret_name or str(c.ret), *process)
                    self._errors[err] = self._errors.get(err, 0) + w
                hist = self._latency.get(key[:2])
                if hist is None:
                    hist = self._latency[key[:2]] = Histogram()
                hist.add(c.duration_ns, w)
                if c.category == "kernel":
                    launch = (self._kernels.label(c.args.get(NAME_KEY), w), c.api)
                    self._launches[launch] = self._launches.get(launch, 0) + w
                    if lines is not None:
                        lines.launch(c, w, who)
                function = BY_EXPORTED.get(c.event)
                if function is None:
                    continue
                if function.name in ROLES and w == 1:  # (sampled: frees are missed)
                    memory.append(MemCall(c.ts_ns, c.duration_ns, c.pid, c.tid, c.process,
                                          c.event, c.ret or 0, c.args))
                elif c.ret == 0:
                    self._count_bytes(function.name, c)
            if memory:
                self._memory.feed(memory)
            if last_ns:  # without scrapes too, what is held is applied and exits are seen
                now_ns = self.clock()
                self._progress.fed(last_ns, now_ns)
                self._memory.settle_live(now_ns)
                if last_ns >= self._next_exit_check:
                    self._next_exit_check = last_ns + EXIT_CHECK_NS
                    self._forget_exited(now_ns)

    def _process_key(self, pid: int, name: str) -> tuple[str, ...]:
        """The process's labels: its name, then its job's."""
        if self.jobs is None:
            return (name, *NO_JOB)
        self._job_pids.setdefault(pid, None)
        return (name, *self.jobs.of(pid))

    def add_gpu(self, work: Iterable[GpuWork]) -> None:
        """Kernels as they ran on the GPU (copies and memsets are not counted here),
        each by its name; with python_lines(), by the line of their launch too.
        With --duty, CUPTI records all along (never switched with the slices):
        every kernel counts by name, and by line only if its launch lies in a
        slice (the probes traced it)."""
        with self._lock:
            lines = self._lines
            for w in work:
                if w.kind != "kernel":
                    continue
                self._count_kernel(w)
                if lines is not None:
                    launch = lines.launch_of(w)
                    if launch is not WAITING and launch is not OUTSIDE and launch is not None:
                        self._count_line(w, launch)
            if lines is not None:
                for w, launch in lines.settle(self.clock()):
                    if launch is not None:
                        self._count_line(w, launch)

    def _count_kernel(self, w: GpuWork) -> None:
        """A kernel's GPU time under its name."""
        name = self._gpu_kernels.label(demangle(w.name) if w.name else None, w.duration_ns)
        hist = self._gpu_time.get(name)
        if hist is None:
            hist = self._gpu_time[name] = Histogram()
        hist.add(w.duration_ns)

    def _count_line(self, work: GpuWork, launch: Launch) -> None:
        """A kernel's GPU time under its launch's line, in its process's label."""
        process = self._processes.holds(launch.process)
        budget = self._line_budgets.get(process)
        if budget is None:
            budget = self._line_budgets[process] = LabelBudget(MAX_LINES, MAX_LINE_NAMES)
        ns = work.duration_ns * launch.weight
        key = (budget.label(launch.line, ns), *process)
        self._gpu_lines[key] = self._gpu_lines.get(key, 0) + ns

    def _count_bytes(self, name: str, c: Call) -> None:
        copy = _copy(name, c.args)
        if copy is not None:
            kind, n = copy
            key = (kind, c.api)
            self._memcpy[key] = self._memcpy.get(key, 0) + n * self.weight
            return
        memset = MEMSETS.get(name)
        if memset is not None:
            arg, width = memset
            self._memset[c.api] = (self._memset.get(c.api, 0)
                                   + int(c.args.get(arg) or 0) * width * self.weight)

    def _forget_exited(self, now_ns: int) -> None:
        """Processes gone, once all their calls are in (EXIT_SLACK_NS): what they held
        is no longer live, and, JOB_GRACE_NS later, they are no longer kept.
        `now_ns`: clock() now."""
        idle = self._progress.idle(now_ns, IDLE_NS)
        fed = self._progress.upto(now_ns, IDLE_NS)  # every call made before this is in
        watched = self._memory.running()
        if self.jobs is not None:
            watched.update(pid for pid, gone in self._job_pids.items() if gone is None)
        for pid in watched:
            if pid not in self._seen_gone and not self.alive(pid):
                self._seen_gone[pid] = now_ns
        for pid, seen in list(self._seen_gone.items()):
            if fed < seen + EXIT_SLACK_NS and not idle:
                continue  # its last calls may still be on their way
            del self._seen_gone[pid]
            self._memory.process_exited(pid, seen)
            if pid in self._job_pids:
                self._job_pids[pid] = seen
        for pid in [p for p, m in self._memory.processes.items() if m.exited]:
            del self._memory.processes[pid]
        if self.jobs is not None:  # a pid may come back as another's, in another job
            for pid, gone in list(self._job_pids.items()):
                if gone is not None and fed - gone >= JOB_GRACE_NS:
                    del self._job_pids[pid]
                    self.jobs.forget(pid)

    def slices_only(self) -> None:
        """serve --duty with lines: from now on, before the first slice too, a
        kernel counts by line only once its launch is known to lie in a slice."""
        with self._lock:
            if self._lines is not None:
                self._lines.slices_only(self.spans)

    def window_traced(self) -> None:
        """serve --duty: one more slice traced, from now on (the time read before
        the lock is: the reader may hold it for a batch of records, and a slice
        told late would count fewer of the launches the probes traced)."""
        now_ns = self.clock()
        with self._lock:
            self.windows += 1
            self.spans.begin(now_ns)
            self._slice_calls.begin(now_ns)
            if self._lines is not None:  # (slices_only() before the first, where told)
                self._lines.slices_only(self.spans)

    def window_ended(self) -> None:
        """serve --duty: the slice is over (the probes are off). Its end read
        before the lock, as its start: told late, it would take in launches
        made after it, while the probes come out."""
        now_ns = self.clock()
        with self._lock:
            self.spans.end(now_ns)

    def set_lost(self, counters: dict[str, int]) -> None:
        """The tracer's counters (cumulative), with decode_errors: the loss causes kept.
        The trace loop gives them about each second: its heartbeat (polled_s)."""
        with self._lock:
            self._lost = {k: v for k, v in counters.items() if k not in NOT_LOST}
            self._polled = time.monotonic()

    def polled_s(self) -> float | None:
        """Seconds since the trace loop last gave its counters (None: never yet)."""
        with self._lock:
            polled = self._polled
        return None if polled is None else time.monotonic() - polled

    def snapshot(self, now_ns: int | None = None) -> Snapshot:
        now_ns = self.clock() if now_ns is None else now_ns
        with self._lock:
            self._memory.settle_live(now_ns)  # by the decoder's progress, as it reads
            self._forget_exited(now_ns)
            self._rank(now_ns)
            processes, kernels, gpu = self._processes, self._kernels, self._gpu_kernels
            calls_error = self._slice_calls.relative_error()
            live: dict[tuple[str, ...], int] = {}
            for pid, proc in self._memory.processes.items():
                process = processes.holds(self._process_key(pid, proc.process))
                for kind in KINDS:
                    key = (*process, kind)
                    live[key] = live.get(key, 0) + proc.live_bytes[kind]
            return Snapshot(
                calls={k: n for k, n in self._calls.items() if processes.exported(k[2:])},
                errors={k: n for k, n in self._errors.items() if processes.exported(k[2:])},
                latency={k: h.copy() for k, h in self._latency.items()},
                memcpy_bytes=dict(self._memcpy), memset_bytes=dict(self._memset),
                live_bytes=live, lost=dict(self._lost),
                kernel_launches={k: n for k, n in self._launches.items() if kernels.exported(k[0])},
                gpu_time={k: h.copy() for k, h in self._gpu_time.items() if gpu.exported(k)},
                sampling_ratio=1 / self.weight, sampled_windows=self.windows,
                sampling_relative_error={} if calls_error is None else {"calls": calls_error},
                gpu_time_processes=self._gpu_processes,
                gpu_time_refusals=dict(self._gpu_refusals),
                gpu_lines={k: ns / 1e9 for k, ns in self._gpu_lines.items()
                           if processes.exported(k[1:])
                           and self._line_budgets[k[1:]].exported(k[0])},
                gpu_lines_unjoined=None if self._lines is None else {
                    "no_traced_launch": self._lines.unjoined, "bound": self._lines.dropped,
                    "no_api_record": self._lines.no_record})

    def _rank(self, now_ns: int) -> None:
        """Labels to the busiest names now; the series of names no longer tracked go."""
        for budget in (self._processes, self._kernels, self._gpu_kernels):
            budget.rank(now_ns)
        for series, budget in ((self._calls, self._processes), (self._errors, self._processes)):
            for key in [k for k in series if not budget.known(k[2:])]:
                del series[key]
        for key in [k for k in self._launches if not self._kernels.known(k[0])]:
            del self._launches[key]
        for name in [k for k in self._gpu_time if not self._gpu_kernels.known(k)]:
            del self._gpu_time[name]
        for process in [p for p in self._line_budgets if not self._processes.known(p)]:
            del self._line_budgets[process]
        for budget in self._line_budgets.values():
            budget.rank(now_ns)
        for key in [k for k in self._gpu_lines if k[1:] not in self._line_budgets
                    or not self._line_budgets[k[1:]].known(k[0])]:
            del self._gpu_lines[key]
