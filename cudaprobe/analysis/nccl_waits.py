"""Who waited for whom: from when each rank's GPU began an operation.

A collective's kernel on one rank cannot finish before every other rank's
has started (it needs their data): a rank whose kernel started first spins
on its GPU until the last one starts. So for the n-th operation of a
communicator (nccl_ops.py), with --gpu-time on every rank, the rank whose
kernel started last is the one the others waited for, and rank r waited
from its own start to that latest start: [start_r, latest). A rank whose
kernel had ended before the latest start (a small send, buffered) did not
wait. The host's entry times say nothing of this: NCCL returns once the work
is queued, so a rank's host runs ahead of its GPU, and further with every
call; those times are not used.

A rank's total wait is the time covered by its waits, each moment counted
once (kernels on several streams may wait at once), within the run: it can
never exceed the run's length (asserted). The clock is CLOCK_MONOTONIC, onto
which every process's CUPTI timestamps are moved (docs/gputime.md): one
clock for the ranks of one host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cudaprobe.analysis.nccl_ops import Communicator, Operation

Window = tuple[int, int]  # the run, CLOCK_MONOTONIC ns: (start, end)


@dataclass
class RankWaits:
    rank: int | str  # "pid N" where its rank is unknown
    pid: int
    last: int = 0  # operations whose kernel it started last
    waited_ns: int = 0  # its kernels' time waiting for a later rank
    caused_ns: int = 0  # how long the others waited for it: the longest any one did, in all
    max_ns: int = 0  # the longest one wait for it

    def to_dict(self, measured: bool = True) -> dict[str, Any]:
        """`measured` False: no operation had GPU time on every rank: no figure
        (None), rather than a 0 that says nobody waited."""
        def given(v: int) -> int | None:
            return v if measured else None
        return {"rank": self.rank, "pid": self.pid, "last": given(self.last),
                "waited_ns": given(self.waited_ns), "caused_ns": given(self.caused_ns),
                "max_ns": given(self.max_ns)}


@dataclass
class CommWaits:
    nranks: int | None
    ordinal: int
    matched: int = 0  # operations seen on every traced rank
    measured: int = 0  # of those, with GPU time on every rank: the waits are theirs
    ranks: list[RankWaits] = field(default_factory=list)

    @property
    def straggler(self) -> RankWaits | None:
        """The rank that started last most often (then: the others waited for it
        longest), if any was ever last."""
        worst = max(self.ranks, key=lambda r: (r.last, r.caused_ns), default=None)
        return worst if worst is not None and worst.last else None

    def to_dict(self) -> dict[str, Any]:
        s = self.straggler
        return {"nranks": self.nranks, "ordinal": self.ordinal,
                "ranks_traced": len(self.ranks), "matched": self.matched,
                "measured": self.measured, "clock": "CLOCK_MONOTONIC",
                "ranks": [r.to_dict(self.measured > 0) for r in self.ranks],
                "straggler": None if s is None else s.rank}


def covered(intervals: list[tuple[int, int]]) -> int:
    """ns covered by the (start, end) intervals, each moment once."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def _clip(start: int, end: int, window: Window | None) -> tuple[int, int] | None:
    if window is not None:
        start, end = max(start, window[0]), min(end, window[1])
    return (start, end) if start < end else None


def comm_waits(comm: Communicator, window: Window | None = None) -> CommWaits:
    """The waits of `comm`'s ranks, among those traced; where every rank of
    it is, also each measured operation's latest_start_ns (what the per-size
    table's GPU time starts from: with a rank missing, the last to start may
    be one not seen)."""
    out = CommWaits(comm.nranks, comm.ordinal)
    pids = list(comm.by_pid)
    every_rank = comm.nranks is not None and len(pids) >= comm.nranks
    ranks = [RankWaits(_label(comm.by_pid[p][0]), p) for p in pids]
    waits: list[list[tuple[int, int]]] = [[] for _ in pids]  # each rank's own
    # [q][p]: p's waits for q; and the longest of them
    caused: list[list[list[tuple[int, int]]]] = [[[] for _ in pids] for _ in pids]
    matched = comm.matched()
    out.matched = len(matched)
    for ops in matched:
        if not all(op.gpu for op in ops):
            continue
        out.measured += 1
        starts = [op.start_ns for op in ops]
        latest = max(starts)
        for op in ops:
            op.latest_start_ns = latest if every_rank else None
        if latest == min(starts):
            continue  # all at once: no one waited, no one was last
        q = starts.index(latest)
        ranks[q].last += 1
        for p, op in enumerate(ops):
            if op.start_ns < latest < op.end_ns:  # still running when the last one came
                span = _clip(op.start_ns, latest, window)
                if span is not None:
                    waits[p].append(span)
                    caused[q][p].append(span)
                    ranks[q].max_ns = max(ranks[q].max_ns, span[1] - span[0])
    for p, r in enumerate(ranks):
        r.waited_ns = covered(waits[p])
        r.caused_ns = max((covered(c) for c in caused[p]), default=0)
        bound = window[1] - window[0] if window is not None else _span(comm.by_pid[r.pid])
        assert r.waited_ns <= bound, (r, bound)  # what docs/nccl.md promises
    out.ranks = ranks
    return out


def _label(op: Operation) -> int | str:
    return op.rank if op.rank is not None else f"pid {op.pid}"


def _span(ops: list[Operation]) -> int:
    timed = [op for op in ops if op.gpu]
    return max(op.end_ns for op in timed) - min(op.start_ns for op in timed) if timed else 0


def transfer_ns(op: Operation) -> int | None:
    """The operation's GPU time once every rank had started it: from the last
    rank's kernel start to this rank's kernel end (its whole kernel where it
    started last, or had ended before the last started); None where not
    measured on every rank."""
    if op.gpu is None or op.latest_start_ns is None:
        return None
    start, end = op.start_ns, op.end_ns
    return end - max(start, op.latest_start_ns) if op.latest_start_ns < end else end - start
