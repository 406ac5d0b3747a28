"""CUDA memory accounting: pure Python over completed calls, no root, no BPF.

What each memory function does is data (ROLES, keyed by catalogue name): an
allocation of some kind, a free, or an implicit free of everything the
process holds (cudaDeviceReset, cuCtxDestroy). The rules:

- Only successful calls count. A failed allocation allocated nothing and a
  failed free freed nothing; both are counted as failures.
- One allocation is counted once. The runtime serves cudaMalloc with
  cuMemAlloc_v2 on the same thread, inside the cudaMalloc call; with both
  layers probed both report it. A driver call that ran inside a runtime
  memory call of the same thread (entered after it, returned before it) is
  the runtime call's own doing: it is dropped and counted as nested.
  Events arrive when calls return, so the driver call comes first; calls are
  therefore held for `hold_ns` after they returned (the caller's runtime call
  returns well within that) and applied in the order they returned.
- A free of a pointer not seen allocated (allocated before tracing began, or
  by an API not traced) is counted as unknown; freeing NULL is no call at all.
- Allocations never freed are leaks when their process exits; those freed
  only by a context destroy or device reset are reported with what freed them.

The context of an allocation is not known, so an implicit free releases all
that the process holds: exact for the primary context (what the runtime uses),
too much for a program that destroys one of several contexts it created.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from cudaprobe.catalogue.functions import DRIVER, FUNCTIONS

ALLOC, FREE, RELEASE_ALL = "alloc", "free", "release_all"
DEVICE, PINNED, MANAGED, ASYNC = "device", "host-pinned", "managed", "async-pool"
KINDS = (DEVICE, PINNED, MANAGED, ASYNC)
PROCESS_EXIT = "process exit"


@dataclass(frozen=True)
class Role:
    action: str  # ALLOC, FREE or RELEASE_ALL
    kind: str | None = None  # what an ALLOC allocates
    pointer: str | None = None  # the argument holding the pointer (an out-parameter for ALLOC)
    size: tuple[str, ...] = ()  # arguments whose product is the size in bytes
    # what a failed call asked for, where `size` has an out-parameter (a pitch),
    # which a failed call does not set: width x height, a lower bound
    asked: tuple[str, ...] = ()


def _alloc(kind: str, pointer: str, *size: str, asked: tuple[str, ...] = ()) -> Role:
    return Role(ALLOC, kind, pointer, size, asked)


def _free(pointer: str) -> Role:
    return Role(FREE, None, pointer)


# catalogue function name -> what it does to memory
ROLES: dict[str, Role] = {
    "cudaMalloc": _alloc(DEVICE, "devPtr", "size"),
    "cudaMallocPitch": _alloc(DEVICE, "devPtr", "pitch", "height", asked=("width", "height")),
    "cudaMallocHost": _alloc(PINNED, "ptr", "size"),
    "cudaHostAlloc": _alloc(PINNED, "pHost", "size"),
    "cudaMallocManaged": _alloc(MANAGED, "devPtr", "size"),
    "cudaMallocAsync": _alloc(ASYNC, "devPtr", "size"),
    "cudaFree": _free("devPtr"),
    "cudaFreeHost": _free("ptr"),
    "cudaFreeAsync": _free("devPtr"),
    "cudaDeviceReset": Role(RELEASE_ALL),
    "cuMemAlloc": _alloc(DEVICE, "dptr", "bytesize"),
    "cuMemAllocPitch": _alloc(DEVICE, "dptr", "pPitch", "Height",
                              asked=("WidthInBytes", "Height")),
    "cuMemAllocHost": _alloc(PINNED, "pp", "bytesize"),
    "cuMemHostAlloc": _alloc(PINNED, "pp", "bytesize"),
    "cuMemAllocManaged": _alloc(MANAGED, "dptr", "bytesize"),
    "cuMemAllocAsync": _alloc(ASYNC, "dptr", "bytesize"),
    "cuMemFree": _free("dptr"),
    "cuMemFreeHost": _free("p"),
    "cuMemFreeAsync": _free("dptr"),
    "cuCtxDestroy": Role(RELEASE_ALL),
}

# every probed symbol (versions and variants too) -> (api, role)
_BY_SYMBOL: dict[str, tuple[str, Role]] = {
    symbol: (f.api, ROLES[f.name]) for f in FUNCTIONS if f.name in ROLES for symbol in f.symbols
}

MAX_TIMELINE = 4096  # points kept per process; older ones are thinned, the peak is kept apart


def memory_functions(apis: set[str]) -> list:
    """The catalogue functions `cudaprobe memory` probes."""
    return [f for f in FUNCTIONS if f.name in ROLES and f.api in apis]


@dataclass(frozen=True)
class MemCall:
    """One completed call, as the accounting needs it (decode.Call plus its call site)."""

    ts_ns: int
    duration_ns: int
    pid: int
    tid: int
    process: str
    event: str  # the probed symbol
    ret: int
    args: dict[str, Any]
    site: tuple[str, ...] = ()  # call site, then its callers when stacks were recorded

    @property
    def end_ns(self) -> int:
        return self.ts_ns + self.duration_ns


@dataclass
class Allocation:
    ptr: int
    size: int
    kind: str
    event: str
    ts_ns: int
    tid: int
    site: tuple[str, ...]
    ended_by: str | None = None  # RELEASE_ALL event or PROCESS_EXIT; None while live


@dataclass
class ProcessMemory:
    pid: int
    process: str
    live: dict[int, Allocation] = field(default_factory=dict)
    live_bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    peak_bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    peak_total: int = 0
    peak_ns: int = 0
    timeline: list[tuple[int, int]] = field(default_factory=list)  # (ns, live total)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    implicit: list[tuple[str, int, int, int]] = field(default_factory=list)  # by, ns, n, bytes
    ended: list[Allocation] = field(default_factory=list)  # never freed explicitly
    exited: bool = False

    @property
    def live_total(self) -> int:
        return sum(self.live_bytes.values())

    def _changed(self, ts_ns: int) -> None:
        total = self.live_total
        for kind, n in self.live_bytes.items():
            self.peak_bytes[kind] = max(self.peak_bytes[kind], n)
        if total > self.peak_total:
            self.peak_total, self.peak_ns = total, ts_ns
        self.timeline.append((ts_ns, total))
        if len(self.timeline) > MAX_TIMELINE:
            self.timeline = self.timeline[::2]

    def allocate(self, a: Allocation) -> None:
        old = self.live.pop(a.ptr, None)
        if old is not None:  # freed by something we did not see
            self.counts["replaced"] += 1
            self.live_bytes[old.kind] -= old.size
        self.live[a.ptr] = a
        self.live_bytes[a.kind] += a.size
        self.counts["allocations"] += 1
        self.counts["bytes_allocated"] += a.size
        self._changed(a.ts_ns)

    def free(self, ptr: int, ts_ns: int) -> None:
        a = self.live.pop(ptr, None)
        if a is None:
            self.counts["unknown_frees"] += 1
            return
        self.live_bytes[a.kind] -= a.size
        self.counts["frees"] += 1
        self.counts["bytes_freed"] += a.size
        self._changed(ts_ns)

    def release_all(self, by: str, ts_ns: int) -> None:
        """Everything live ends without a free: a context destroy, or the process exit."""
        released = list(self.live.values())
        if by != PROCESS_EXIT:
            self.implicit.append((by, ts_ns, len(released), sum(a.size for a in released)))
        for a in released:
            a.ended_by = by
        self.ended += released
        self.live.clear()
        self.live_bytes = dict.fromkeys(KINDS, 0)
        if released:
            self._changed(ts_ns)


# How long a returned call waits for the runtime call it may be nested in to
# return too (microseconds later, in practice): also how far live bytes lag.
HOLD_NS = 250_000_000


class MemoryAccounting:
    """Feed completed calls in the order they arrive; read `processes`."""

    def __init__(self, hold_ns: int = HOLD_NS) -> None:
        self.hold_ns = hold_ns
        self.processes: dict[int, ProcessMemory] = {}
        self._held: list[tuple[MemCall, Role]] = []  # not applied yet
        # held driver calls per (pid, tid): what the thread's next runtime call may contain
        self._driver: dict[tuple[int, int], list[MemCall]] = {}
        self._nested: set[int] = set()  # id() of held driver calls found nested: dropped

    def feed(self, calls: list[MemCall]) -> None:
        for call in calls:
            found = _BY_SYMBOL.get(call.event)
            if found is None:
                continue
            api, role = found
            if api == DRIVER:
                self._driver.setdefault((call.pid, call.tid), []).append(call)
            else:
                self._drop_nested(call)
            self._held.append((call, role))

    def _drop_nested(self, outer: MemCall) -> None:
        """Driver calls that ran inside this runtime call are its own doing. The
        thread's earlier driver calls cannot be inside a later call: forget them."""
        inner = self._driver.pop((outer.pid, outer.tid), [])
        nested = {id(c) for c in inner if outer.ts_ns <= c.ts_ns and c.end_ns <= outer.end_ns}
        if nested:
            self._process(outer).counts["nested_driver_calls"] += len(nested)
            self._nested |= nested

    def settle(self, now_ns: int | None = None, pid: int | None = None) -> None:
        """Apply held calls that returned `hold_ns` before `now_ns` (all, if None), of
        `pid` (all processes, if None), in the order they returned."""
        ready, keep = [], []
        for held in self._held:
            call = held[0]
            if id(call) in self._nested:
                self._nested.discard(id(call))
                continue
            due = now_ns is None or call.end_ns < now_ns - self.hold_ns
            due = due and pid in (None, call.pid)
            (ready if due else keep).append(held)
        self._held = keep
        if not ready:
            return
        applied = {id(h[0]) for h in ready}
        for key in list(self._driver):
            left = [c for c in self._driver[key] if id(c) not in applied]
            if left:
                self._driver[key] = left
            else:
                del self._driver[key]
        for call, role in sorted(ready, key=lambda h: h[0].end_ns):
            self._apply(call, role)

    def running(self) -> set[int]:
        """Processes seen (calls applied or held) and not known to have exited."""
        pids = {h[0].pid for h in self._held}
        pids.update(p.pid for p in self.processes.values())
        return {pid for pid in pids if pid not in self.processes or not self.processes[pid].exited}

    def process_exited(self, pid: int, ts_ns: int) -> None:
        """All of pid's calls have arrived: apply them, and what is left is leaked."""
        self.settle(pid=pid)
        proc = self.processes.get(pid)
        if proc is not None and not proc.exited:
            proc.release_all(PROCESS_EXIT, ts_ns)
            proc.exited = True

    def _process(self, call: MemCall) -> ProcessMemory:
        proc = self.processes.get(call.pid)
        if proc is None:
            proc = self.processes[call.pid] = ProcessMemory(call.pid, call.process)
        return proc

    def _apply(self, call: MemCall, role: Role) -> None:
        proc = self._process(call)
        if role.action == RELEASE_ALL:
            if call.ret == 0:
                proc.release_all(call.event, call.end_ns)
            return
        ptr = _pointer(call.args.get(role.pointer))
        if role.action == FREE:
            if call.ret != 0:
                proc.counts["failed_frees"] += 1
            elif ptr:
                proc.free(ptr, call.end_ns)
            return
        size = 1
        for name in (role.asked or role.size) if call.ret != 0 else role.size:
            size *= int(call.args.get(name) or 0)
        if call.ret != 0:
            proc.counts["failed_allocations"] += 1
            proc.counts["bytes_failed"] += size
        elif ptr:  # a zero-byte allocation gives NULL
            proc.allocate(Allocation(ptr, size, role.kind or DEVICE, call.event, call.end_ns,
                                     call.tid, call.site))


def _pointer(value: Any) -> int:
    """Pointers are hex strings in decoded arguments (ints in hand-made ones)."""
    if isinstance(value, str):
        return int(value, 16)
    return int(value or 0)


@dataclass
class LeakGroup:
    """Allocations of one call site that were never freed, ended the same way."""

    site: tuple[str, ...]
    event: str
    kind: str
    ended_by: str
    allocations: list[Allocation]

    @property
    def bytes(self) -> int:
        return sum(a.size for a in self.allocations)


def group_by_site(allocations: list[Allocation]) -> list[LeakGroup]:
    """Grouped by (call site, function, kind, how it ended); biggest groups first,
    biggest allocations first within a group."""
    groups: dict[tuple, LeakGroup] = {}
    for a in allocations:
        key = (a.site, a.event, a.kind, a.ended_by or "")
        if key not in groups:
            groups[key] = LeakGroup(a.site, a.event, a.kind, a.ended_by or "", [])
        groups[key].allocations.append(a)
    for g in groups.values():
        g.allocations.sort(key=lambda a: (-a.size, a.ts_ns))
    return sorted(groups.values(), key=lambda g: (-g.bytes, g.site, g.event))
