"""Which runtime call made which driver calls, from their times alone:
`Nesting` as trees of Calls (OTLP's spans), `CallOrder` as records in call
order with their depth (the trace's rows; below).

No entry events reach user space: a call arrives when it returns. So the
driver calls that cudaMalloc made (cuMemAlloc_v2 ..., on the same thread,
inside cudaMalloc's interval) arrive before cudaMalloc itself. `Nesting`
holds each thread's driver calls until that thread's next runtime call
arrives: the ones inside its interval are its children, the others had no
traced runtime call around them (the program called the driver API itself)
and come out alone. Runtime calls are not nested in each other: the runtime
API is the top of the stack.

A thread that makes only driver calls never sends that proof, so a driver
call also comes out alone once it ended more than `hold_ns` ago, when more
than `max_held` wait, or at `flush()`. In-flight calls (no duration) last
until the end of the trace.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from cudaprobe.catalogue.functions import RUNTIME
from cudaprobe.decode.calls import Call
from cudaprobe.probe.event import R_DURATION, R_FUNC_ID, R_TID, R_TS

HOLD_NS = 5_000_000_000
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


class Nesting:
    def __init__(self, hold_ns: int = HOLD_NS, max_held: int = MAX_HELD,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.hold_ns = hold_ns
        self.max_held = max_held
        self.clock = clock  # CLOCK_MONOTONIC, as the calls' ts_ns
        self._held: dict[int, deque[Call]] = {}  # tid -> driver calls, in arrival order
        self._count = 0

    def add(self, calls: list[Call]) -> list[CallTree]:
        """The trees complete so far, in the order their top calls arrived."""
        out: list[CallTree] = []
        for call in calls:
            if call.api == RUNTIME:
                out += self._close(call)
            else:
                self._held.setdefault(call.tid, deque()).append(call)
                self._count += 1
        out += self._expire()
        return out

    def flush(self) -> list[CallTree]:
        """Everything still held, alone: the trace is over."""
        out = [CallTree(c) for held in self._held.values() for c in held]
        self._held.clear()
        self._count = 0
        out.sort(key=lambda t: t.call.ts_ns)
        return out

    def _close(self, runtime: Call) -> list[CallTree]:
        held = self._held.pop(runtime.tid, None)
        if not held:
            return [CallTree(runtime)]
        self._count -= len(held)
        tree = CallTree(runtime)
        alone = []
        for c in held:
            (tree.children if encloses(runtime, c) else alone).append(c)
        return [CallTree(c) for c in alone] + [tree]

    def _expire(self) -> list[CallTree]:
        if not self._count:
            return []
        out: list[CallTree] = []
        deadline = self.clock() - self.hold_ns
        for tid in list(self._held):
            held = self._held[tid]
            while held and (end_ns(held[0]) or deadline) < deadline:
                out.append(CallTree(held.popleft()))
            if not held:
                del self._held[tid]
        self._count -= len(out)
        if self._count > self.max_held:  # the oldest first, whatever their thread
            oldest = sorted((c for h in self._held.values() for c in h), key=lambda c: c.ts_ns)
            for c in oldest[: self._count - self.max_held]:
                self._held[c.tid].remove(c)
                out.append(CallTree(c))
            self._held = {tid: h for tid, h in self._held.items() if h}
            self._count = self.max_held
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
    ran inside it). A runtime call is the top of the stack (no traced call
    encloses it): once one arrives, its thread's held calls are complete and
    go out, in order. A driver call may still be inside a runtime call that
    has not returned, so it is held until its thread's next runtime call, or
    until it ended `hold_ns` before the newest call seen (the clock, when a
    poll found nothing: a program of driver calls only), or when more than
    `max_held` wait, or at flush(). A call let go that way is shown at the top
    (depth 0) and its parent, when it returns, without it: the hold bounds
    both the delay and the memory.
    """

    def __init__(self, is_runtime: list[bool], hold_ns: int = ORDER_HOLD_NS,
                 max_held: int = MAX_HELD, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.is_runtime = is_runtime  # by probe id
        self.hold_ns = hold_ns
        self.max_held = max_held
        self.clock = clock
        self._held: dict[int, list[list]] = {}  # tid -> its top calls [rec, children, size]
        self._count = 0  # records held, children too

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
            runtime = fid >= nprobes or is_runtime[fid]  # an unknown probe: out at once
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
            held.append([rec, children, 1 + sum(c[2] for c in children)])
            self._count += 1
            if runtime:
                del held_by_tid[tid]
                for node in held:
                    self._count -= node[2]
                    _flatten(node, 0, None, out, marks)
        if self._count:
            deadline = (newest if records else self.clock()) - self.hold_ns
            self._expire(deadline, out, marks)
        return out, marks

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
        return out, marks

    def _expire(self, deadline: int, out: list[tuple], marks: list[Mark]) -> None:
        for tid in list(self._held):
            held = self._held[tid]
            while held and held[0][0][R_TS] + held[0][0][R_DURATION] < deadline:
                node = held.pop(0)
                self._count -= node[2]
                _flatten(node, 0, None, out, marks)
            if not held:
                del self._held[tid]
        while self._count > self.max_held:  # the oldest first, whatever their thread
            tid = min(self._held, key=lambda t: self._held[t][0][0][R_TS])
            node = self._held[tid].pop(0)
            self._count -= node[2]
            _flatten(node, 0, None, out, marks)
            if not self._held[tid]:
                del self._held[tid]


def _flatten(node: list, depth: int, parent: int | None, out: list[tuple],
             marks: list[Mark]) -> None:
    rec, children, _size = node
    out.append(rec)
    marks.append((depth, parent))
    for child in children:
        _flatten(child, depth + 1, rec[R_TS], out, marks)
