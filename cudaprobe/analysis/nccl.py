"""NCCL calls summed per collective and rank, and the ranks the others wait for.

`collective_stats(calls)` (`cudaprobe stats --by collective`): per collective
(or send, recv) and rank, the calls, the bytes as nccl-tests counts them, the
host latency, and where --gpu-time joined the NCCL kernels to the calls, their
GPU time and the bandwidths nccl-tests reports: algbw = size / time, busbw =
algbw x a factor per collective that makes it comparable with the link's
speed (2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and
all-to-all, 1 for broadcast, reduce and send/recv). nccl-tests' size is the
whole buffer: for all-gather what each rank receives (sendcount x n), for
reduce-scatter what each sends (recvcount x n).

The bandwidths are the median call's: a collective's kernel runs until every
rank has joined it, so a call that waited for a late rank (its straggler's
wait) would count as a slow transfer in a mean. An NCCL call made inside
another (ncclBcast calls ncclBroadcast) is counted once, as the outer call.
NCCL queues a group's kernels at ncclGroupEnd: the GPU work of a group with
one collective or transfer in it is that call's; that of a larger group stays
with its ncclGroupEnd (a row of its own).

`stragglers(calls)`: for each communicator, the n-th collective or transfer of
every rank is the same operation (NCCL requires them in the same order), so
the spread of their entry times is how long the first rank to arrive waited
for the last. Communicators are matched across processes by their number of
ranks and the order in which each process first used one of that size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any

from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import gpu_span_ns
from cudaprobe.decode.nesting import encloses

TRANSFERS = ("collective", "p2p")
IN_PROGRESS = 7  # ncclInProgress: queued by a non-blocking communicator, no failure
# collective -> (size multiplied by the number of ranks, busbw factor's kind)
SHAPES = {
    "ncclAllReduce": (False, "allreduce"), "ncclReduceScatter": (True, "fraction"),
    "ncclAllGather": (True, "fraction"), "ncclAlltoAll": (True, "fraction"),
    "ncclGather": (True, "fraction"), "ncclScatter": (True, "fraction"),
}


def bus_factor(event: str, nranks: int) -> float:
    """busbw / algbw, as nccl-tests defines it."""
    kind = SHAPES.get(event, (False, "one"))[1]
    if kind == "allreduce":
        return 2 * (nranks - 1) / nranks
    if kind == "fraction":
        return (nranks - 1) / nranks
    return 1.0


def nccl_tests_size(event: str, nbytes: int, nranks: int) -> int:
    """The size nccl-tests reports for one call of `event` that passed `nbytes`."""
    return nbytes * nranks if SHAPES.get(event, (False,))[0] else nbytes


@dataclass
class CollectiveRow:
    event: str
    pid: int
    rank: int | None
    nranks: int | None
    calls: int = 0
    failed: int = 0  # returned an error: no bytes, no GPU time
    bytes: int = 0  # nccl-tests' size, summed
    host_ns: int = 0
    gpu_calls: int = 0  # calls whose GPU work was joined
    gpu_ns: int = 0
    rates: list[float] = field(default_factory=list, repr=False)  # their size / GPU ns

    @property
    def algbw(self) -> float | None:
        """GB/s (1e9 bytes a second, a byte a ns): the median call's size / GPU time."""
        return median(self.rates) if self.rates else None

    @property
    def busbw(self) -> float | None:
        if self.algbw is None or not self.nranks:
            return None
        return self.algbw * bus_factor(self.event, self.nranks)

    def to_dict(self) -> dict[str, Any]:
        def rounded(v: float | None) -> float | None:
            return None if v is None else round(v, 3)
        return {"event": self.event, "pid": self.pid, "rank": self.rank, "nranks": self.nranks,
                "calls": self.calls, "failed": self.failed, "bytes": self.bytes,
                "host_total_ns": self.host_ns,
                "host_avg_ns": self.host_ns // self.calls if self.calls else 0,
                "gpu_calls": self.gpu_calls, "gpu_total_ns": self.gpu_ns,
                "algbw_gbps": rounded(self.algbw), "busbw_gbps": rounded(self.busbw)}


@dataclass
class RankWait:
    """How long a communicator's other ranks waited for one rank."""
    rank: int | str
    last: int = 0  # operations it entered last
    caused_ns: int = 0  # the spreads of those
    max_ns: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "last": self.last, "caused_ns": self.caused_ns,
                "max_ns": self.max_ns}


@dataclass
class CommWaits:
    nranks: int | None
    ordinal: int  # the processes' n-th communicator of that size
    matched: int = 0  # operations seen on every rank
    ranks: list[RankWait] = field(default_factory=list)

    @property
    def straggler(self) -> RankWait | None:
        """The rank the others waited for longest, if any waited."""
        worst = max(self.ranks, key=lambda r: r.caused_ns, default=None)
        return worst if worst is not None and worst.caused_ns > 0 else None

    def to_dict(self) -> dict[str, Any]:
        s = self.straggler
        return {"nranks": self.nranks, "ordinal": self.ordinal, "matched": self.matched,
                "ranks": [r.to_dict() for r in self.ranks],
                "straggler": None if s is None else s.rank}


@dataclass
class NcclStats:
    rows: list[CollectiveRow]
    waits: list[CommWaits]

    def to_dict(self) -> dict[str, Any]:
        return {"collectives": [r.to_dict() for r in self.rows],
                "stragglers": [w.to_dict() for w in self.waits]}


def outermost(calls: list[Call]) -> list[Call]:
    """The NCCL calls not made inside another traced NCCL call of their thread
    (ncclBcast's ncclBroadcast), in time order."""
    out: list[Call] = []
    last: dict[tuple[int, int], Call] = {}  # (pid, tid) -> its latest outer call
    for c in sorted((c for c in calls if c.api == "nccl"), key=lambda c: c.ts_ns):
        outer = last.get((c.pid, c.tid))
        if outer is not None and outer is not c and encloses(outer, c):
            continue
        last[(c.pid, c.tid)] = c
        out.append(c)
    return out


def _transfers(calls: list[Call]) -> list[Call]:
    return [c for c in calls if c.category in TRANSFERS and c.duration_ns is not None
            and c.ret in (0, IN_PROGRESS)]


def _group_gpu(calls: list[Call]) -> dict[int, int]:
    """id(call) -> GPU ns, for the one transfer of a group whose work its
    ncclGroupEnd queued; a larger group's stays with the ncclGroupEnd."""
    out: dict[int, int] = {}
    members: dict[tuple[int, int], list[Call]] = {}
    depth: dict[tuple[int, int], int] = {}
    for c in calls:
        key = (c.pid, c.tid)
        if c.event == "ncclGroupStart":
            depth[key] = depth.get(key, 0) + 1
        elif c.event == "ncclGroupEnd" and depth.get(key):
            depth[key] -= 1
            if depth[key] == 0:
                group = members.pop(key, [])
                if c.gpu and len(group) == 1:
                    out[id(group[0])] = gpu_span_ns(c.gpu)
                    c.gpu = None  # counted with its one member
        elif depth.get(key) and c.category in TRANSFERS:
            members.setdefault(key, []).append(c)
    return out


def collective_stats(calls: list[Call]) -> NcclStats:
    calls = outermost(calls)
    grouped = _group_gpu(calls)
    rows: dict[tuple, CollectiveRow] = {}
    for c in calls:
        if c.duration_ns is None or not (
                c.category in TRANSFERS or (c.event == "ncclGroupEnd" and c.gpu)):
            continue
        rank, nranks = c.args.get("rank"), c.args.get("nranks")
        key = (c.event, c.pid, rank, nranks)
        row = rows.get(key)
        if row is None:
            row = rows[key] = CollectiveRow(c.event, c.pid, rank, nranks)
        row.calls += 1
        row.host_ns += c.duration_ns
        if c.ret not in (0, IN_PROGRESS):
            row.failed += 1
            continue
        size = nccl_tests_size(c.event, c.args.get("bytes") or 0, nranks or 1)
        row.bytes += size
        gpu_ns = grouped.get(id(c)) or (gpu_span_ns(c.gpu) if c.gpu else 0)
        if gpu_ns:
            row.gpu_calls += 1
            row.gpu_ns += gpu_ns
            row.rates.append(size / gpu_ns)
    ordered = sorted(rows.values(), key=lambda r: (r.event, r.rank is None, r.rank or 0, r.pid))
    return NcclStats(ordered, stragglers(calls))


def stragglers(calls: list[Call]) -> list[CommWaits]:
    """Per communicator used by more than one process: per rank, how often it
    entered the n-th operation last and how long the first rank had waited."""
    # (nranks, ordinal) -> pid -> its operations' (entry ns, rank)
    calls = outermost(calls)
    seqs: dict[tuple[int | None, int], dict[int, list[tuple[int, Any]]]] = {}
    # pid -> comm -> (nranks, its ordinal among the pid's communicators of that size)
    ordinals: dict[int, dict[Any, tuple[int | None, int]]] = {}
    for c in _transfers(calls):
        nranks = c.args.get("nranks")
        mine = ordinals.setdefault(c.pid, {})
        comm = c.args.get("comm")
        key = mine.get(comm)
        if key is None:
            key = mine[comm] = (nranks, sum(1 for k in mine.values() if k[0] == nranks))
        rank = c.args.get("rank")
        seqs.setdefault(key, {}).setdefault(c.pid, []).append(
            (c.ts_ns, rank if rank is not None else f"pid {c.pid}"))
    out = []
    for (nranks, ordinal), by_pid in sorted(seqs.items(), key=lambda kv: (kv[0][0] or 0,
                                                                          kv[0][1])):
        if len(by_pid) < 2:
            continue
        waits = CommWaits(nranks, ordinal)
        per_rank: dict[Any, RankWait] = {}
        for seq in by_pid.values():
            per_rank.setdefault(seq[0][1], RankWait(seq[0][1]))
        waits.matched = min(len(seq) for seq in by_pid.values())
        for n in range(waits.matched):
            entries = [seq[n] for seq in by_pid.values()]
            first, last = min(entries)[0], max(entries)
            spread = last[0] - first
            r = per_rank.setdefault(last[1], RankWait(last[1]))
            r.last += 1
            r.caused_ns += spread
            r.max_ns = max(r.max_ns, spread)
        waits.ranks = sorted(per_rank.values(),
                             key=lambda r: (isinstance(r.rank, str), str(r.rank).zfill(9)))
        out.append(waits)
    return out
