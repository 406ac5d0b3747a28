"""CUDA memory accounting: pure Python over completed calls, no root, no BPF.

What each memory function does is data (ROLES, keyed by catalogue name): an
allocation of some kind, a free, an implicit free of everything the process
holds (cudaDeviceReset, cuCtxDestroy), or for virtual memory a release, a
map or an unmap. The books of each process are kept in memstate.py. The rules:

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
- Virtual memory counts physical memory: cuMemCreate's size, live until the
  handle is released and every mapping of it unmapped (memstate.py). Address
  reservations and mappings are no memory of their own.
- Arguments are looked up by the headers' parameter names, never by position,
  and read as numbers whether decoded as ints or as hex text.

The context of an allocation is not known, so an implicit free releases all
that the process holds: exact for the primary context (what the runtime uses),
too much for a program that destroys one of several contexts it created.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cudaprobe.analysis.memstate import (
    ASYNC,
    DEVICE,
    MANAGED,
    PINNED,
    PROCESS_EXIT,
    REGISTERED,
    VMM,
    Allocation,
    ProcessMemory,
)
from cudaprobe.catalogue.functions import DRIVER, FUNCTIONS

ALLOC, FREE, RELEASE_ALL = "alloc", "free", "release_all"
# virtual memory: a handle released, an address range mapped to one, unmapped
RELEASE, MAP, UNMAP = "release", "map", "unmap"


@dataclass(frozen=True)
class Role:
    action: str  # ALLOC, FREE, RELEASE_ALL, RELEASE, MAP or UNMAP
    kind: str | None = None  # what an ALLOC allocates
    # the argument holding the pointer (an out-parameter for ALLOC, but for a
    # registration), the handle for RELEASE, the address for MAP and UNMAP
    pointer: str | None = None
    size: tuple[str, ...] = ()  # arguments whose product is the size in bytes
    # what a failed call asked for, where `size` has an out-parameter (a pitch),
    # which a failed call does not set: width x height, a lower bound
    asked: tuple[str, ...] = ()
    handle: str | None = None  # MAP: the argument holding the handle mapped


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
    # pools: what the API says, live from allocation to free (memory freed to a
    # pool may stay reserved by the pool)
    "cudaMallocFromPoolAsync": _alloc(ASYNC, "ptr", "size"),
    "cuMemAllocFromPoolAsync": _alloc(ASYNC, "dptr", "bytesize"),
    # host memory page-locked in place: the pointer is the caller's own
    "cudaHostRegister": _alloc(REGISTERED, "ptr", "size"),
    "cudaHostUnregister": _free("ptr"),
    "cuMemHostRegister": _alloc(REGISTERED, "p", "bytesize"),
    "cuMemHostUnregister": _free("p"),
    # virtual memory: physical memory made, then mapped at reserved addresses
    "cuMemCreate": _alloc(VMM, "handle", "size"),
    "cuMemRelease": Role(RELEASE, pointer="handle"),
    "cuMemMap": Role(MAP, pointer="ptr", size=("size",), handle="handle"),
    "cuMemUnmap": Role(UNMAP, pointer="ptr", size=("size",)),
}

# every probed symbol (versions and variants too) -> (api, role)
_BY_SYMBOL: dict[str, tuple[str, Role]] = {
    symbol: (f.api, ROLES[f.name]) for f in FUNCTIONS if f.name in ROLES for symbol in f.symbols
}

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


# How long a returned call waits for the runtime call it may be nested in to
# return too (microseconds later, in practice): also how far live bytes lag.
HOLD_NS = 250_000_000


class DecoderProgress:
    """How far a decoder has come: the latest end of a call fed, and the clock when
    calls were last fed. A decoder running behind (under load) reads a call's
    return seconds after it happened, so what waits on later calls is settled by
    this progress, not by the clock; by the clock only once nothing has come for a
    while (all that returned has been read)."""

    def __init__(self) -> None:
        self.fed_ns = 0
        self.fed_at: int | None = None

    def fed(self, end_ns: int, now_ns: int) -> None:
        """Calls up to `end_ns` read, at clock `now_ns`."""
        self.fed_ns = max(self.fed_ns, end_ns)
        self.fed_at = now_ns

    def idle(self, now_ns: int, idle_ns: int) -> bool:
        """Nothing fed for `idle_ns` (or ever)."""
        return self.fed_at is None or now_ns - self.fed_at >= idle_ns

    def upto(self, now_ns: int, idle_ns: int) -> int:
        """Every call that ended before this has been fed."""
        return now_ns if self.idle(now_ns, idle_ns) else self.fed_ns


class MemoryAccounting:
    """Feed completed calls in the order they arrive; read `processes`."""

    def __init__(self, hold_ns: int = HOLD_NS) -> None:
        self.hold_ns = hold_ns
        self.processes: dict[int, ProcessMemory] = {}
        self._held: list[tuple[MemCall, Role]] = []  # not applied yet
        # held driver calls per (pid, tid): what the thread's next runtime call may contain
        self._driver: dict[tuple[int, int], list[MemCall]] = {}
        self._nested: set[int] = set()  # id() of held driver calls found nested: dropped
        self.progress = DecoderProgress()  # fed by feed(calls, now_ns), or by its owner

    def settle_live(self, now_ns: int) -> None:
        """settle() while calls still come: by how far the decoder has come, not by
        the clock (a decoder running behind reads a runtime call's return later than
        the driver call inside it); by the clock once nothing has come for hold_ns."""
        self.settle(self.progress.upto(now_ns, self.hold_ns))

    def feed(self, calls: list[MemCall], now_ns: int | None = None) -> None:
        """`now_ns`: the clock as they are fed, for `progress` (settle_live); None
        where the owner feeds `progress` with every call it reads."""
        if calls and now_ns is not None:
            self.progress.fed(max(c.end_ns for c in calls), now_ns)
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
        ptr = _number(call.args.get(role.pointer))
        if role.action in (FREE, RELEASE):
            if call.ret != 0:
                proc.counts["failed_frees"] += 1
            elif ptr and role.action == FREE:
                proc.free(ptr, call.end_ns)
            elif ptr:
                proc.release(ptr, call.end_ns)
            return
        size = 1
        for name in (role.asked or role.size) if call.ret != 0 else role.size:
            size *= _number(call.args.get(name))
        if role.action in (MAP, UNMAP):
            if call.ret != 0:
                proc.counts["failed_maps"] += 1
            elif role.action == MAP:
                proc.map(ptr, size, _number(call.args.get(role.handle)))
            else:
                proc.unmap(ptr, size, call.end_ns)
            return
        if call.ret != 0:
            proc.counts["failed_allocations"] += 1
            proc.counts["bytes_failed"] += size
        elif ptr:  # a zero-byte allocation gives NULL
            proc.allocate(Allocation(ptr, size, role.kind or DEVICE, call.event, call.end_ns,
                                     call.tid, call.site))


def _number(value: Any) -> int:
    """An argument as a number: pointers and handles are hex text in decoded
    calls, sizes ints; None where an out-parameter was not read."""
    if isinstance(value, str):
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    return int(value or 0)


@dataclass
class LeakGroup:
    """Allocations of one call site that were never freed, ended the same way."""

    site: tuple[str, ...]
    event: str
    kind: str
    ended_by: str
    allocations: list[Allocation]
    outstanding: str = ""  # VMM: what kept the physical memory (Allocation.outstanding)

    @property
    def bytes(self) -> int:
        return sum(a.size for a in self.allocations)


def group_by_site(allocations: list[Allocation]) -> list[LeakGroup]:
    """Grouped by (call site, function, kind, how it ended); biggest groups first,
    biggest allocations first within a group."""
    groups: dict[tuple, LeakGroup] = {}
    for a in allocations:
        key = (a.site, a.event, a.kind, a.ended_by or "", a.outstanding)
        if key not in groups:
            groups[key] = LeakGroup(a.site, a.event, a.kind, a.ended_by or "", [],
                                    a.outstanding)
        groups[key].allocations.append(a)
    for g in groups.values():
        g.allocations.sort(key=lambda a: (-a.size, a.ts_ns))
    return sorted(groups.values(), key=lambda g: (-g.bytes, g.site, g.event))
