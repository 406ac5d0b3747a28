"""NCCL's calls as the operations it runs, in each communicator's order.

An operation is what NCCL runs as one on the GPU: a collective, send or
receive made alone, or the calls of an ncclGroupStart/ncclGroupEnd group on
one communicator, whose kernels NCCL launches at ncclGroupEnd (its `gpu`
then is the ncclGroupEnd's). An NCCL call made inside another of its thread
(ncclBcast calls ncclBroadcast) is the outer one.

NCCL requires every rank of a communicator to make its operations in the
same order, so the n-th operation of each rank is one operation. Which
communicator of one process is which of another's is not in any argument:
they are matched by their number of ranks and the order in which each
process first used one of that size (a job's world first, then the ones it
splits off or makes for send/recv). A rank's trace may begin later than
another's (cudaprobe attached to a running job): `align` finds how far
apart their sequences are from where their GPU work overlaps.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from cudaprobe.analysis.nccl_shapes import Sized, sized
from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import GpuWork
from cudaprobe.decode.nesting import encloses

TRANSFERS = ("collective", "p2p")
IN_PROGRESS = 7  # ncclInProgress: queued by a non-blocking communicator, no failure
ALIGN_PROBES = 16  # GPU-timed operations of a rank whose overlaps propose an alignment
ALIGN_NEAR = 8  # the operations of the first rank each is compared with: those started last


@dataclass
class Operation:
    pid: int
    comm: Any  # the communicator's handle, as decoded
    rank: int | None
    nranks: int | None
    calls: list[Call]  # the call, or the group's calls on this communicator
    host_ns: int  # on the CPU: the call, or ncclGroupStart's entry to ncclGroupEnd's return
    failed: bool  # a call of it returned an error
    gpu: list[GpuWork] | None = None  # its kernels, where --gpu-time joined them
    row: Sized | None = None
    latest_start_ns: int | None = None  # the last rank's kernel start (matched on every rank)

    @property
    def start_ns(self) -> int:
        return min(w.start_ns for w in self.gpu)

    @property
    def end_ns(self) -> int:
        return max(w.end_ns for w in self.gpu)


@dataclass
class Communicator:
    """One communicator as its processes used it: each process's operations."""
    nranks: int | None
    ordinal: int  # the processes' n-th communicator of that size
    by_pid: dict[int, list[Operation]] = field(default_factory=dict)
    offsets: dict[int, int] = field(default_factory=dict)  # pid -> index shift to the first pid

    def matched(self) -> list[list[Operation]]:
        """Each operation seen on every process, as its list of (one per process)."""
        if len(self.by_pid) < 2:
            return []
        pids = list(self.by_pid)
        lo = max(-self.offsets[p] for p in pids)
        hi = min(len(self.by_pid[p]) - self.offsets[p] for p in pids)
        return [[self.by_pid[p][n + self.offsets[p]] for p in pids] for n in range(max(lo, 0),
                                                                                   hi)]


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


def _ok(c: Call) -> bool:
    return c.ret in (0, IN_PROGRESS)


def _operation(calls: list[Call], host_ns: int, end: Call | None = None) -> Operation:
    first = calls[0]
    op = Operation(first.pid, first.args.get("comm"), first.args.get("rank"),
                   first.args.get("nranks"), calls, host_ns,
                   not all(map(_ok, calls)) or (end is not None and not _ok(end)))
    op.row = sized(calls, op.nranks)
    return op


def operations(calls: list[Call]) -> list[Operation]:
    """The operations of `calls` (any order, any process), in time order."""
    out: list[Operation] = []
    depth: dict[tuple[int, int], int] = {}
    opened: dict[tuple[int, int], Call] = {}  # the outermost ncclGroupStart of a thread
    members: dict[tuple[int, int], list[Call]] = {}
    for c in outermost(calls):
        if c.duration_ns is None:
            continue
        key = (c.pid, c.tid)
        if c.event == "ncclGroupStart":
            depth[key] = depth.get(key, 0) + 1
            opened.setdefault(key, c)
        elif c.event == "ncclGroupEnd" and depth.get(key):
            depth[key] -= 1
            if depth[key] == 0:
                out += _group(opened.pop(key), members.pop(key, []), c)
        elif c.category in TRANSFERS:
            if depth.get(key):
                members.setdefault(key, []).append(c)
            else:
                op = _operation([c], c.duration_ns)
                op.gpu = c.gpu if c.gpu else None
                out.append(op)
    return out


def _group(start: Call, calls: list[Call], end: Call) -> list[Operation]:
    """A group's operations, one a communicator; its kernels (on its
    ncclGroupEnd) are its operation's where it used one communicator, else
    nobody's (NCCL's records do not say which kernel was whose)."""
    by_comm: dict[Any, list[Call]] = {}
    for c in calls:
        by_comm.setdefault(c.args.get("comm"), []).append(c)
    host_ns = end.ts_ns + end.duration_ns - start.ts_ns
    ops = [_operation(members, host_ns, end) for members in by_comm.values()]
    gpu = end.gpu or [w for c in calls for w in (c.gpu or [])]
    if len(ops) == 1 and gpu:
        ops[0].gpu = gpu
    return ops


def communicators(ops: list[Operation]) -> list[Communicator]:
    """`ops` per communicator, matched across processes, each process's
    sequence aligned with the first's (the lowest rank)."""
    found: dict[tuple[int | None, int], Communicator] = {}
    ordinals: dict[int, dict[Any, tuple[int | None, int]]] = {}
    for op in ops:
        mine = ordinals.setdefault(op.pid, {})
        key = mine.get(op.comm)
        if key is None:
            key = mine[op.comm] = (op.nranks, sum(1 for k in mine.values()
                                                  if k[0] == op.nranks))
        comm = found.setdefault(key, Communicator(*key))
        comm.by_pid.setdefault(op.pid, []).append(op)
    out = sorted(found.values(), key=lambda c: (c.nranks or 0, c.ordinal))
    for comm in out:
        comm.by_pid = dict(sorted(comm.by_pid.items(), key=lambda kv: (
            kv[1][0].rank is None, kv[1][0].rank or 0, kv[0])))
        first = next(iter(comm.by_pid.values()))
        comm.offsets = {pid: align(first, seq) for pid, seq in comm.by_pid.items()}
    return out


def _same(a: Operation, b: Operation) -> bool:
    """Could be one operation on two ranks: its kernels overlap in time (each
    rank's runs until the others have joined), and its calls passed as many bytes."""
    return (a.gpu is not None and b.gpu is not None and a.start_ns < b.end_ns
            and b.start_ns < a.end_ns and a.row.bytes == b.row.bytes)


def align(first: list[Operation], seq: list[Operation]) -> int:
    """k such that seq[n + k] is first[n]: 0 unless their GPU work says the
    two traces began at different operations (an attach to a running job)."""
    if first is seq:
        return 0
    timed = [(i, o) for i, o in enumerate(first) if o.gpu]
    starts = [o.start_ns for _, o in timed]
    probes = [(n, o) for n, o in enumerate(seq) if o.gpu][:ALIGN_PROBES]
    candidates = {0}
    for n, op in probes:
        # the operations of `first` that started before this one ended, the latest few
        i = bisect.bisect_right(starts, op.end_ns)
        candidates.update(n - m for m, near in timed[max(0, i - ALIGN_NEAR):i] if _same(near, op))

    def score(k: int) -> int:
        return sum(1 for n, op in enumerate(first) if 0 <= n + k < len(seq)
                   and _same(op, seq[n + k]))

    return max(sorted(candidates, key=abs), key=score)
