"""One process's memory books: what it holds, by kind, its peak and timeline,
and what ended without a free. memtrack.py decides what each call does to
them; this module only keeps them.

Two address spaces are kept apart: pointers (device, pinned, managed, pool
and registered memory share one unified address space) and the handles of
virtual-memory physical allocations (cuMemCreate), which are numbers of
their own. A physical allocation is live from cuMemCreate until it has been
released (cuMemRelease) and unmapped from every address it was mapped at
(cuMemUnmap), in either order: what the driver says frees it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

DEVICE, PINNED, MANAGED, ASYNC = "device", "host-pinned", "managed", "async-pool"
VMM, REGISTERED = "vmm", "host-registered"
KINDS = (DEVICE, PINNED, MANAGED, ASYNC, VMM, REGISTERED)
# shown in the table whatever was seen (the others once a process has used them)
BASE_KINDS = (DEVICE, PINNED, MANAGED, ASYNC)
PROCESS_EXIT = "process exit"
ADDRESS, HANDLE = "address", "handle"  # the two spaces allocations are keyed in

MAX_TIMELINE = 4096  # points kept per process; older ones are thinned, the peak is kept apart


@dataclass
class Allocation:
    ptr: int  # the address; for VMM the physical allocation's handle
    size: int
    kind: str
    event: str
    ts_ns: int
    tid: int
    site: tuple[str, ...]
    ended_by: str | None = None  # RELEASE_ALL event or PROCESS_EXIT; None while live
    # VMM only: cuMemRelease seen, and the addresses it is mapped at (-> mapped bytes)
    released: bool = False
    mappings: dict[int, int] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return (HANDLE if self.kind == VMM else ADDRESS, self.ptr)

    @property
    def outstanding(self) -> str:
        """For VMM: what keeps the physical memory allocated ('' for other kinds)."""
        if self.kind != VMM:
            return ""
        missing = [] if self.released else ["not released"]
        if self.mappings:
            missing.append(f"mapped at {len(self.mappings)} "
                           f"address{'' if len(self.mappings) == 1 else 'es'}")
        return ", ".join(missing)


@dataclass
class ProcessMemory:
    pid: int
    process: str
    live: dict[tuple[str, int], Allocation] = field(default_factory=dict)  # by Allocation.key
    # VMM mappings: address -> (size, handle)
    mapped: dict[int, tuple[int, int]] = field(default_factory=dict)
    live_bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    peak_bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    peak_total: int = 0
    peak_ns: int = 0
    timeline: list[tuple[int, int]] = field(default_factory=list)  # (ns, live total)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    implicit: list[tuple[str, int, int, int]] = field(default_factory=list)  # by, ns, n, bytes
    ended: list[Allocation] = field(default_factory=list)  # never freed explicitly
    exited: bool = False
    # live bytes per call site, and as they were at the peak: where the peak's memory
    # was allocated (with --py-stacks, a site begins with its Python line)
    live_by_site: dict[tuple[str, ...], int] = field(default_factory=lambda: defaultdict(int))
    peak_by_site: dict[tuple[str, ...], int] = field(default_factory=dict)

    @property
    def live_total(self) -> int:
        return sum(self.live_bytes.values())

    def _changed(self, ts_ns: int) -> None:
        total = self.live_total
        for kind, n in self.live_bytes.items():
            self.peak_bytes[kind] = max(self.peak_bytes[kind], n)
        if total > self.peak_total:
            self.peak_total, self.peak_ns = total, ts_ns
            self.peak_by_site = {s: n for s, n in self.live_by_site.items() if n}
        self.timeline.append((ts_ns, total))
        if len(self.timeline) > MAX_TIMELINE:
            self.timeline = self.timeline[::2]

    def allocate(self, a: Allocation) -> None:
        old = self.live.pop(a.key, None)
        if old is not None:  # freed by something we did not see
            self.counts["replaced"] += 1
            self.live_bytes[old.kind] -= old.size
            self.live_by_site[old.site] -= old.size
        self.live[a.key] = a
        self.live_bytes[a.kind] += a.size
        self.live_by_site[a.site] += a.size
        self.counts["allocations"] += 1
        self.counts["bytes_allocated"] += a.size
        self._changed(a.ts_ns)

    def free(self, ptr: int, ts_ns: int) -> None:
        """A free call: ends the allocation at `ptr`."""
        a = self.live.get((ADDRESS, ptr))
        if a is None:
            self.counts["unknown_frees"] += 1
            return
        self.counts["frees"] += 1
        self._end(a, ts_ns)

    def _end(self, a: Allocation, ts_ns: int) -> None:
        del self.live[a.key]
        self.live_bytes[a.kind] -= a.size
        self.live_by_site[a.site] -= a.size
        self.counts["bytes_freed"] += a.size
        self._changed(ts_ns)

    def release(self, handle: int, ts_ns: int) -> None:
        """cuMemRelease: the physical memory goes once it is mapped nowhere."""
        a = self.live.get((HANDLE, handle))
        if a is None or a.released:
            self.counts["unknown_frees"] += 1
            return
        self.counts["frees"] += 1
        a.released = True
        if not a.mappings:
            self._end(a, ts_ns)

    def map(self, address: int, size: int, handle: int) -> None:
        a = self.live.get((HANDLE, handle))
        if a is None:  # created before tracing began: its memory is not counted
            self.counts["unknown_maps"] += 1
            return
        self.mapped[address] = (size, handle)
        a.mappings[address] = size

    def unmap(self, address: int, size: int, ts_ns: int) -> None:
        """cuMemUnmap of [address, address+size): every mapping that starts in it
        (one call may unmap a range that several mappings make up)."""
        for start in [s for s in self.mapped if address <= s < address + size]:
            _, handle = self.mapped.pop(start)
            a = self.live.get((HANDLE, handle))
            if a is not None:
                a.mappings.pop(start, None)
                if a.released and not a.mappings:
                    self._end(a, ts_ns)

    def release_all(self, by: str, ts_ns: int) -> None:
        """Everything live ends without a free: a context destroy, or the process exit."""
        released = list(self.live.values())
        if by != PROCESS_EXIT:
            self.implicit.append((by, ts_ns, len(released), sum(a.size for a in released)))
        for a in released:
            a.ended_by = by
        self.ended += released
        self.live.clear()
        self.mapped.clear()
        self.live_bytes = dict.fromkeys(KINDS, 0)
        if released:
            self._changed(ts_ns)
