"""Which runtime call made which driver calls, from their times alone.

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
