"""Which call made which, from their times alone: the trace's rows in the
order each thread made its calls, with their depth (`CallOrder`), and trees
of them (`call_trees`: OTLP's spans).

No entry events reach user space: a call arrives when it returns. So the
driver calls that cudaMalloc made (cuMemAlloc_v2 ..., on the same thread,
inside cudaMalloc's interval) arrive before cudaMalloc itself, and are held
until it comes (CallOrder's docstring says for how long at most). Runtime
calls are not nested in each other: the runtime API is the top of the stack,
with NCCL's calls, which are the outermost layer: NCCL calls the runtime (its
own copy, linked into libnccl) and, in ncclBcast, ncclBroadcast. Such a
call, made while its thread is in an NCCL call, is marked so by the probe
(R_CALLER nonzero: the BPF program's CP_OUTER) and held like a driver call,
until the NCCL call adopts it. An NCCL group is no interval of one call: the
calls a thread makes between ncclGroupStart and ncclGroupEnd are put under
the ncclGroupStart (one level down, as a driver call under a runtime call),
and the ncclGroupEnd closes it at the group's own level.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from cudaprobe.decode.calls import Call
from cudaprobe.probe.event import R_CALLER, R_DURATION, R_FUNC_ID, R_TID, R_TS

MAX_HELD = 10_000


@dataclass
class CallTree:
    """A call and the driver calls made inside it (empty for most)."""

    call: Call
    children: list[Call] = field(default_factory=list)

    def __len__(self) -> int:
        return 1 + len(self.children)


def end_ns(call: Call) -> int | None:
    return None if call.duration_ns is None else call.ts_ns + call.duration_ns


def encloses(outer: Call, inner: Call) -> bool:
    """inner ran within outer's interval (an in-flight call never ended)."""
    if inner.ts_ns < outer.ts_ns:
        return False
    outer_end, inner_end = end_ns(outer), end_ns(inner)
    return outer_end is None or (inner_end is not None and inner_end <= outer_end)


def call_trees(calls: list[Call]) -> list[CallTree]:
    """Calls in call order (CallOrder's, with their depth) as CallTrees: a call
    at depth 0 and the calls made inside it, at any depth, as its children
    (OTLP's spans: a runtime call and the driver calls it made). CallOrder lets
    a tree go whole, in one batch, so a batch holds whole trees."""
    out: list[CallTree] = []
    latest: dict[int, CallTree] = {}  # tid -> its tree begun last
    for call in calls:
        tree = latest.get(call.tid)
        if call.depth and tree is not None and encloses(tree.call, call):
            tree.children.append(call)
        else:
            tree = latest[call.tid] = CallTree(call)
            out.append(tree)
    return out


# The trace's order: rows in the order the calls were made, nested calls under
# their parent, with their depth. Records stay records (JSONL and CSV are
# written from them); what is held is bounded in time and in number.

ORDER_HOLD_NS = 2_000_000_000
Mark = tuple[int, "int | None"]  # (depth, the parent's ts_ns, or None at the top)


class CallOrder:
    """Ring records (event.R_* tuples), which arrive as calls return (a nested
    call before its parent), put back in the order each thread made them, with
    each call's depth and its parent (the parent's ts_ns: a call is known by
    its tid and ts_ns).

    A call arriving adopts the calls of its thread held since it started (they
    ran inside it). A runtime or NCCL call is the top of the stack (no traced
    call encloses it) unless the probe marked it as made inside an NCCL call:
    once a top call arrives, its thread's held calls are complete and go out,
    in order. A driver call, or a marked call, may still be inside a call that
    has not returned, so it is held until its thread's next top call, or
    until it ended `hold_ns` before the newest call seen (the clock, when a
    poll found nothing: a program of driver calls only), or when more than
    `max_held` wait, or at flush(). A call let go that way is shown at the top
    (depth 0) and its parent, when it returns, without it: the hold bounds
    both the delay and the memory.
    """

    def __init__(self, is_runtime: list[bool], hold_ns: int = ORDER_HOLD_NS,
                 max_held: int = MAX_HELD, clock: Callable[[], int] = time.monotonic_ns,
                 groups: list[int] | None = None) -> None:
        self.is_runtime = is_runtime  # by probe id
        # by probe id: +1 opens a group (ncclGroupStart), -1 closes it (ncclGroupEnd)
        self.groups = groups if groups is not None and any(groups) else None
        self._open: dict[int, list[int]] = {}  # tid -> ts_ns of its open groups' starts
        self.hold_ns = hold_ns
        self.max_held = max_held
        self.clock = clock
        self._held: dict[int, list[list]] = {}  # tid -> its top calls [rec, children, size]
        self._count = 0  # records held, children too

    def as_they_come(self, fids: set[int], any_caller: bool) -> bool:
        """add() of records of these probes would give them back as they are, each
        at the top: nothing held, no NCCL group, every one a runtime call not
        made inside an NCCL call (none of them `any_caller`)."""
        nprobes = len(self.is_runtime)
        return (not self._count and self.groups is None and not any_caller
                and all(fid < nprobes and self.is_runtime[fid] for fid in fids))

    def add(self, records: list[tuple]) -> tuple[list[tuple], list[Mark]]:
        """The records that can go out now, in call order, and their marks."""
        out: list[tuple] = []
        marks: list[Mark] = []
        held_by_tid, is_runtime, nprobes = self._held, self.is_runtime, len(self.is_runtime)
        newest = 0
        for rec in records:
            tid, ts = rec[R_TID], rec[R_TS]
            end = ts + rec[R_DURATION]
            if end > newest:
                newest = end
            fid = rec[R_FUNC_ID]
            # an unknown probe: out at once; one made inside an NCCL call: held for it
            runtime = (fid >= nprobes or is_runtime[fid]) and not rec[R_CALLER]
            held = held_by_tid.get(tid)
            if held is None:
                if runtime:
                    out.append(rec)
                    marks.append((0, None))
                else:
                    held_by_tid[tid] = [[rec, [], 1]]
                    self._count += 1
                continue
            i = len(held)
            while i and held[i - 1][0][R_TS] >= ts:
                i -= 1
            children = held[i:]
            del held[i:]
            held.append([rec, children, 1 + sum(c[2] for c in children) if children else 1])
            self._count += 1
            if runtime:
                del held_by_tid[tid]
                for node in held:
                    self._count -= node[2]
                    _flatten(node, 0, None, out, marks)
        if self._count:
            deadline = (newest if records else self.clock()) - self.hold_ns
            self._expire(deadline, out, marks)
        if self.groups is not None and out:
            self._in_groups(out, marks)
        return out, marks

    def _in_groups(self, out: list[tuple], marks: list[Mark]) -> None:
        """Put each call made inside an open NCCL group of its thread under
        the group's ncclGroupStart (out is in call order per thread)."""
        groups, nprobes = self.groups, len(self.groups)
        for i, rec in enumerate(out):
            fid, tid = rec[R_FUNC_ID], rec[R_TID]
            step = groups[fid] if fid < nprobes else 0
            stack = self._open.get(tid)
            if step < 0 and stack:
                stack.pop()  # the end shows at its group's level
            if stack:
                depth, parent = marks[i]
                marks[i] = (depth + len(stack), stack[-1] if parent is None else parent)
            if step > 0:
                self._open.setdefault(tid, []).append(rec[R_TS])
            elif stack is not None and not stack:
                del self._open[tid]

    def flush(self) -> tuple[list[tuple], list[Mark]]:
        """Everything held: the trace is over."""
        out: list[tuple] = []
        marks: list[Mark] = []
        roots = sorted((node for held in self._held.values() for node in held),
                       key=lambda node: node[0][R_TS])
        for node in roots:
            _flatten(node, 0, None, out, marks)
        self._held.clear()
        self._count = 0
        if self.groups is not None and out:
            self._in_groups(out, marks)
        return out, marks

    def _expire(self, deadline: int, out: list[tuple], marks: list[Mark]) -> None:
        """Out: each thread's calls held that ended before `deadline`, then the
        oldest, whatever their thread, while more than max_held are held. A
        thread's run of them is cut from its list at once: a driver-only
        program (no runtime call ever adopts its calls) holds thousands."""
        for tid in list(self._held):
            held = self._held[tid]
            n = 0
            for node in held:
                rec = node[0]
                if rec[R_TS] + rec[R_DURATION] >= deadline:
                    break
                self._count -= node[2]
                _flatten(node, 0, None, out, marks)
                n += 1
            if n == len(held):
                del self._held[tid]
            elif n:
                del held[:n]
        while self._count > self.max_held:  # the oldest first, whatever their thread
            tid = min(self._held, key=lambda t: self._held[t][0][0][R_TS])
            held = self._held[tid]
            # ... taken from this thread while older than every other's first
            others = min((h[0][0][R_TS] for t, h in self._held.items() if t != tid),
                         default=None)
            n = 0
            while (n < len(held) and self._count > self.max_held
                   and (others is None or held[n][0][R_TS] < others or n == 0)):
                node = held[n]
                self._count -= node[2]
                _flatten(node, 0, None, out, marks)
                n += 1
            if n == len(held):
                del self._held[tid]
            else:
                del held[:n]


def _flatten(node: list, depth: int, parent: int | None, out: list[tuple],
             marks: list[Mark]) -> None:
    rec, children, _size = node
    out.append(rec)
    marks.append((depth, parent))
    for child in children:
        _flatten(child, depth + 1, rec[R_TS], out, marks)
