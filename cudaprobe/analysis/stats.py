"""Per-function call statistics, aggregated in the kernel (bpf/stats.bpf.c).

The BPF program keeps, per probe and per CPU, a count, total, min and max
duration, and a log2 histogram: slot k counts calls that took [2^k, 2^(k+1))
ns (slot 0 also holds 0 and 1 ns; the last slot everything longer) and sums
their durations. Failed calls are counted per (probe, return code). Reading
the maps costs the same whatever the call rate; this module turns what was
read into a report.

Percentiles are estimated from the histogram: the slot holding the wanted
rank is found exactly; inside it, its calls are taken as spread evenly around
the slot's mean, as widely as the slot (and the observed min and max) allow.
An estimate is off by less than the width of its slot, a factor of 2 at worst,
and much less where a slot's calls cluster, as API latencies do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from cudaprobe.analysis.gpustats import GpuStats
from cudaprobe.analysis.nccl import NcclStats
from cudaprobe.analysis.summary import Untraced
from cudaprobe.catalogue.enums import error_name
from cudaprobe.decode.calls import Call
from cudaprobe.decode.handles import NAME_KEY
from cudaprobe.probe.plan import Probe

HIST_SLOTS = 48  # CP_HIST_SLOTS in bpf/cudaprobe.h
SCALARS = 5  # count, total_ns, min_ns, max_ns, errors_unkeyed: then the histogram
SCHEMA = 1
PERCENTILES = (50, 95, 99)
PERCENTILE_NOTE = "p50/p95/p99 estimated from log2 latency buckets, within 2x"


def slot_of(ns: int) -> int:
    """The histogram slot of a duration, as the BPF program computes it."""
    return min(max(ns, 1).bit_length() - 1, HIST_SLOTS - 1)


def slot_bounds(k: int) -> tuple[int, int]:
    """[lo, hi) in ns of histogram slot k (the last slot is open-ended)."""
    return (0 if k == 0 else 1 << k), 1 << (k + 1)


def percentile(hist: list[int], hist_ns: list[int], q: float, min_ns: int,
               max_ns: int) -> int:
    """The q-th percentile (0 < q <= 100) of the durations in `hist`, estimated."""
    n = sum(hist)
    if n == 0:
        return 0
    rank = max(1, math.ceil(q / 100 * n))
    below = 0
    for k, c in enumerate(hist):
        if c and below + c >= rank:
            lo, hi = slot_bounds(k)
            lo, hi = max(lo, min_ns), min(hi, max_ns)
            mean = min(max(hist_ns[k] / c, lo), hi)
            half = min(mean - lo, hi - mean)
            return round(mean - half + (rank - below - 0.5) / c * 2 * half)
        below += c
    return max_ns


@dataclass
class FunctionStats:
    event: str  # the probed symbol, as trace names it
    api: str
    category: str
    count: int = 0
    total_ns: int = 0
    min_ns: int = 0
    max_ns: int = 0
    hist: list[int] = field(default_factory=lambda: [0] * HIST_SLOTS)
    hist_ns: list[int] = field(default_factory=lambda: [0] * HIST_SLOTS)  # durations per slot
    errors: dict[str, int] = field(default_factory=dict)  # return-code name -> calls
    errors_unkeyed: int = 0  # failed calls whose code the full error map could not hold

    @property
    def avg_ns(self) -> int:
        return self.total_ns // self.count if self.count else 0

    @property
    def failed(self) -> int:
        return sum(self.errors.values()) + self.errors_unkeyed

    def p(self, q: float) -> int:
        return percentile(self.hist, self.hist_ns, q, self.min_ns, self.max_ns)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "event": self.event, "api": self.api, "category": self.category,
            "count": self.count, "total_ns": self.total_ns, "avg_ns": self.avg_ns,
            "min_ns": self.min_ns, "max_ns": self.max_ns,
        }
        d.update({f"p{q}_ns": self.p(q) for q in PERCENTILES})
        d["failed"] = self.failed
        d["errors"] = dict(sorted(self.errors.items(), key=lambda kv: -kv[1]))
        d["histogram"] = [{"lo_ns": slot_bounds(k)[0], "hi_ns": slot_bounds(k)[1], "count": c,
                           "total_ns": self.hist_ns[k]} for k, c in enumerate(self.hist) if c]
        return d


def combine_cpus(per_cpu: list[tuple[int, ...]]) -> FunctionStats:
    """Sum one probe's per-CPU `struct cp_stat`s, flattened as MapReader.read_stats gives
    them: (count, total_ns, min_ns, max_ns, errors_unkeyed, *hist, *hist_ns)."""
    s = FunctionStats("", "", "")
    mins = []
    for v in per_cpu:
        if not v[0]:
            continue
        s.count += v[0]
        s.total_ns += v[1]
        mins.append(v[2])
        s.max_ns = max(s.max_ns, v[3])
        s.errors_unkeyed += v[4]
        for k in range(HIST_SLOTS):
            s.hist[k] += v[SCALARS + k]
            s.hist_ns[k] += v[SCALARS + HIST_SLOTS + k]
    s.min_ns = min(mins, default=0)
    return s


def collect(probes: list[Probe], raw_stats: dict[int, list[tuple[int, ...]]],
            raw_errors: dict[tuple[int, int], int]) -> list[FunctionStats]:
    """FunctionStats for every probe that saw a call, from what MapReader.read_stats
    and MapReader.read_errors returned."""
    out = []
    for probe in probes:
        s = combine_cpus(raw_stats.get(probe.func_id, []))
        if not s.count:
            continue
        fn = probe.function
        s.event, s.api, s.category = probe.symbol, fn.api, fn.category
        for (func_id, ret), n in raw_errors.items():
            if func_id == probe.func_id and n:
                name = error_name(fn.api, ret)
                s.errors[name] = s.errors.get(name, 0) + n
        out.append(s)
    return out


class KernelTally:
    """Launches per kernel name (`cudaprobe stats --by kernel`): the same figures
    as per function, counted in Python from the trace path's decoded launches.
    The kernel's aggregation is per probe, and a probe does not know which
    kernel a call launches (its name comes from the symbols in user space), so
    this costs what `trace` costs per launch, not what `stats` does. Launches
    whose kernel is unknown are counted under their call, `(kernel unknown)`.
    With `name_of`, the rows are what it names a call (None: not counted)."""

    def __init__(self, name_of: Callable[[Call], str | None] | None = None) -> None:
        self._by_name: dict[str, FunctionStats] = {}
        self.name_of = name_of or _kernel_name

    def add(self, calls: list[Call]) -> None:
        for c in calls:
            name = self.name_of(c)
            if name is None or c.duration_ns is None:
                continue  # still running at the end: no duration to count
            s = self._by_name.get(name)
            if s is None:
                s = self._by_name[name] = FunctionStats(name, c.api, c.category)
            ns = c.duration_ns
            s.min_ns = min(s.min_ns, ns) if s.count else ns
            s.max_ns = max(s.max_ns, ns)
            s.count += 1
            s.total_ns += ns
            k = slot_of(ns)
            s.hist[k] += 1
            s.hist_ns[k] += ns
            if c.ret:
                s.errors[c.ret_name] = s.errors.get(c.ret_name, 0) + 1

    @property
    def functions(self) -> list[FunctionStats]:
        return list(self._by_name.values())


def _kernel_name(c: Call) -> str | None:
    if c.category != "kernel":
        return None
    return c.args.get(NAME_KEY) or f"{c.event} (kernel unknown)"


SORT_KEYS = {
    "total": lambda s: -s.total_ns,
    "count": lambda s: -s.count,
    "avg": lambda s: -s.avg_ns,
    "min": lambda s: -s.min_ns,
    "max": lambda s: -s.max_ns,
    "p50": lambda s: -s.p(50),
    "p95": lambda s: -s.p(95),
    "p99": lambda s: -s.p(99),
    "errors": lambda s: -s.failed,
    "name": lambda s: s.event,
}


@dataclass
class StatsReport:
    functions: list[FunctionStats]
    duration_s: float = 0.0
    libraries: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    in_flight: int = 0  # calls entered but not returned when the report was made
    lost: dict[str, int] = field(default_factory=dict)
    gpu: GpuStats | None = None  # stats --gpu-time
    nccl: NcclStats | None = None  # stats --by collective
    untraced: list[Untraced] = field(default_factory=list)  # spans whose calls were not seen
    processes_traced: int | None = None  # as Summary.processes_traced
    per: str = "function"  # what a row is: a function, a kernel, a Python line (--by)

    def sorted(self, key: str = "total") -> list[FunctionStats]:
        return sorted(self.functions, key=lambda s: (SORT_KEYS[key](s), s.event))

    @property
    def total_calls(self) -> int:
        return sum(s.count for s in self.functions)

    def to_dict(self, sort: str = "total") -> dict[str, Any]:
        return {
            "cudaprobe": "stats",
            "schema": SCHEMA,
            "duration_s": round(self.duration_s, 3),
            "calls": self.total_calls,
            "percentiles": PERCENTILE_NOTE,
            "functions": [s.to_dict() for s in self.sorted(sort)],
            "in_flight": self.in_flight,
            "lost": self.lost,
            "lost_total": sum(self.lost.values()),
            "libraries": self.libraries,
            "not_found": self.not_found,
            **({"gpu": self.gpu.to_dict()} if self.gpu is not None else {}),
            **({"nccl": self.nccl.to_dict()} if self.nccl is not None else {}),
            "untraced": [u.to_dict() for u in self.untraced],
            **({"processes_traced": self.processes_traced}
               if self.processes_traced is not None else {}),
        }
