"""Memory accounting over recorded call sequences: what is counted, deduplicated,
freed, leaked, and how leaks are grouped. No root, no BPF."""

from __future__ import annotations

from cudaprobe.analysis.memtrack import (
    ALLOC,
    DEVICE,
    MANAGED,
    PINNED,
    PROCESS_EXIT,
    ROLES,
    MemCall,
    MemoryAccounting,
    group_by_site,
    memory_functions,
)
from cudaprobe.catalogue import functions as catalogue
from cudaprobe.catalogue.functions import ArgKind

MiB = 1 << 20
PID, TID = 100, 101
SITE_A = ("alloc_weights(unsigned long)+0x1c (app)", "main+0x2a (app)")
SITE_B = ("alloc_scratch(unsigned long)+0x1c (app)", "main+0x3b (app)")


def call(event: str, t: int, dur: int = 10, ret: int = 0, tid: int = TID, pid: int = PID,
         site: tuple[str, ...] = SITE_A, **args) -> MemCall:
    return MemCall(t, dur, pid, tid, "app", event, ret, args, site)


def malloc(t, ptr, size, **kw):
    return call("cudaMalloc", t, devPtr=hex(ptr), size=size, **kw)


def free(t, ptr, **kw):
    return call("cudaFree", t, devPtr=hex(ptr), **kw)


def run(calls: list[MemCall], exit_at: int | None = 10_000) -> MemoryAccounting:
    acct = MemoryAccounting(hold_ns=1000)
    acct.feed(calls)
    if exit_at is not None:
        acct.process_exited(PID, exit_at)
    else:
        acct.settle()
    return acct


def test_roles_name_catalogue_functions_and_their_arguments():
    for name, role in ROLES.items():
        fns = [f for f in catalogue.FUNCTIONS if f.name == name]
        assert fns, name
        for fn in fns:
            kinds = {a.name: a.kind for a in fn.args}
            for arg in role.size:
                assert kinds[arg] in (ArgKind.SIZE, ArgKind.COUNT, ArgKind.OUT_SIZE), (name, arg)
            if role.action == ALLOC:
                assert kinds[role.pointer] is ArgKind.OUT_PTR, name
            elif role.pointer:
                assert kinds[role.pointer] is ArgKind.PTR, name
    names = {f.name for f in memory_functions({catalogue.RUNTIME, catalogue.DRIVER})}
    assert {"cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree", "cudaDeviceReset"} <= names
    assert all(f.api == "runtime" for f in memory_functions({catalogue.RUNTIME}))


def test_leak_is_what_was_never_freed():
    acct = run([malloc(100, 0x7F00_0000_0000, 3 * MiB, site=SITE_A),
                malloc(200, 0x7F00_0040_0000, 1 * MiB, site=SITE_B),
                free(300, 0x7F00_0040_0000)])
    p = acct.processes[PID]
    assert p.exited and not p.live and p.live_total == 0
    assert (p.counts["allocations"], p.counts["frees"]) == (2, 1)
    assert p.counts["bytes_allocated"] == 4 * MiB and p.counts["bytes_freed"] == MiB
    assert p.peak_total == 4 * MiB and p.peak_ns == 210 and p.peak_bytes[DEVICE] == 4 * MiB
    assert p.timeline == [(110, 3 * MiB), (210, 4 * MiB), (310, 3 * MiB), (10_000, 0)]
    [leak] = group_by_site(p.ended)
    assert leak.site == SITE_A and leak.bytes == 3 * MiB and leak.ended_by == PROCESS_EXIT
    assert [a.ptr for a in leak.allocations] == [0x7F00_0000_0000]


def test_failed_calls_allocate_and_free_nothing():
    acct = run([malloc(100, 0, 1 << 50, ret=2),
                malloc(200, 0xA000, 4096),
                free(300, 0xA000, ret=1),  # failed: 0xA000 stays allocated
                free(400, 0xB000, ret=1)])
    p = acct.processes[PID]
    assert p.counts["failed_allocations"] == 1 and p.counts["bytes_failed"] == 1 << 50
    assert p.counts["failed_frees"] == 2 and p.counts["frees"] == 0
    assert p.counts["allocations"] == 1
    assert [a.ptr for a in p.ended] == [0xA000]


def test_failed_allocations_out_parameters_not_read():
    """A failed call's out-parameters are None (not read): the pointer, and
    cudaMallocPitch's pitch, which its size is counted from; a failed pitched
    allocation counts width x height, what it asked for at least."""
    acct = run([call("cudaMalloc", 100, ret=2, devPtr=None, size=4096),
                call("cudaMallocPitch", 200, ret=2, devPtr=None, pitch=None, width=100,
                     height=8)])
    p = acct.processes[PID]
    assert p.counts["failed_allocations"] == 2 and p.counts["bytes_failed"] == 4096 + 800
    assert p.counts["allocations"] == 0 and p.ended == []


def test_driver_call_inside_runtime_call_counts_once():
    # cudaMalloc [100, 200] on TID serves itself with cuMemAlloc_v2 [150, 170]:
    # the driver call returns (and arrives) first
    acct = run([call("cuMemAlloc_v2", 150, 20, dptr=hex(0xD000), bytesize=MiB, site=("x",)),
                malloc(100, 0xD000, MiB, dur=100),
                call("cuMemFree_v2", 320, 20, dptr=hex(0xD000), site=("y",)),
                free(300, 0xD000, dur=100)])
    p = acct.processes[PID]
    assert p.counts["nested_driver_calls"] == 2
    assert (p.counts["allocations"], p.counts["frees"], p.counts["unknown_frees"]) == (1, 1, 0)
    assert p.peak_total == MiB and not p.ended


def test_driver_calls_outside_runtime_calls_count():
    acct = run([
        call("cuMemAlloc_v2", 50, 20, dptr=hex(0xD000), bytesize=MiB),  # before the cudaMalloc
        call("cuMemAlloc_v2", 150, 20, tid=TID + 1, dptr=hex(0xE000), bytesize=MiB),  # other thread
        malloc(100, 0xF000, MiB, dur=100),
    ])
    p = acct.processes[PID]
    assert p.counts["nested_driver_calls"] == 0 and p.counts["allocations"] == 3
    assert sorted(a.event for a in p.ended) == ["cuMemAlloc_v2", "cuMemAlloc_v2", "cudaMalloc"]


def test_calls_are_held_then_applied_in_the_order_they_returned():
    acct = MemoryAccounting(hold_ns=1000)
    # thread 2 frees 0xA000 (returns at 510) before thread 1 gets the address again
    # (returns at 600), but thread 1's event happens to arrive first
    acct.feed([malloc(100, 0xA000, 64), malloc(590, 0xA000, 128, tid=TID + 1),
               free(500, 0xA000)])
    acct.settle(now_ns=1000)
    assert PID not in acct.processes  # nothing returned `hold` before 1000
    acct.settle(now_ns=1505)
    assert acct.processes[PID].counts["frees"] == 0  # only the first allocation is due
    acct.settle(now_ns=2000)
    p = acct.processes[PID]
    assert p.counts["replaced"] == 0 and p.counts["frees"] == 1
    assert [(a.ptr, a.size) for a in p.live.values()] == [(0xA000, 128)]


def test_device_reset_frees_implicitly_and_later_allocations_leak():
    acct = run([
        malloc(100, 0xA000, MiB),
        call("cudaMallocManaged", 200, devPtr=hex(0xB000), size=4 * MiB, flags=1),
        call("cudaDeviceReset", 300, 10, ret=35),  # failed: frees nothing
        call("cuCtxDestroy_v2", 420, 5, ctx="0x0"),  # inside the reset below: its own doing
        call("cudaDeviceReset", 400, 100),
        malloc(600, 0xC000, 64 * 1024, site=SITE_B),
    ])
    p = acct.processes[PID]
    assert p.implicit == [("cudaDeviceReset", 500, 2, 5 * MiB)]
    assert p.counts["nested_driver_calls"] == 1
    by_end = {a.ptr: a.ended_by for a in p.ended}
    assert by_end == {0xA000: "cudaDeviceReset", 0xB000: "cudaDeviceReset", 0xC000: PROCESS_EXIT}
    groups = group_by_site(p.ended)
    assert [(g.event, g.kind, g.ended_by, g.bytes) for g in groups] == [
        ("cudaMallocManaged", MANAGED, "cudaDeviceReset", 4 * MiB),
        ("cudaMalloc", DEVICE, "cudaDeviceReset", MiB),
        ("cudaMalloc", DEVICE, PROCESS_EXIT, 64 * 1024)]


def test_kinds_sizes_and_unknown_frees():
    acct = run([
        call("cudaMallocHost", 100, ptr=hex(0x1000), size=256 * 1024),
        call("cudaHostAlloc", 110, pHost=hex(0x2000), size=8192, flags=0),
        call("cudaMallocPitch", 120, devPtr=hex(0x3000), pitch=1024, width=1000, height=10),
        call("cudaMallocAsync_ptsz", 130, devPtr=hex(0x4000), size=512, hStream="0x0"),
        call("cuMemAllocPitch_v2", 140, tid=7, dptr=hex(0x5000), pPitch=512, WidthInBytes=500,
             Height=3, ElementSizeBytes=4),
        call("cudaFreeAsync", 150, devPtr=hex(0x4000), hStream="0x0"),
        free(160, 0x9999),  # allocated before tracing started
        free(170, 0),  # cudaFree(NULL): no call at all
        call("cudaMalloc", 180, devPtr=hex(0), size=0),  # zero bytes: NULL, nothing allocated
    ], exit_at=None)
    p = acct.processes[PID]
    assert p.live_bytes == {"device": 10240 + 1536, "host-pinned": 256 * 1024 + 8192,
                            "managed": 0, "async-pool": 0}
    assert p.peak_bytes["async-pool"] == 512 and p.peak_bytes[PINNED] == 256 * 1024 + 8192
    assert p.counts["unknown_frees"] == 1 and p.counts["frees"] == 1
    assert p.counts["allocations"] == 5 and not p.exited


def test_processes_are_kept_apart():
    acct = MemoryAccounting(hold_ns=0)
    acct.feed([malloc(100, 0xA000, 10), malloc(100, 0xA000, 20, pid=200, tid=201),
               free(200, 0xA000, pid=200, tid=201)])
    acct.process_exited(200, 1000)
    acct.settle()
    assert acct.processes[200].exited and not acct.processes[200].ended
    assert not acct.processes[PID].exited and acct.processes[PID].live_total == 10


def test_leaks_grouped_by_site_biggest_first():
    acct = run([malloc(100 + i, 0x1000 * (i + 1), size, site=site) for i, (size, site) in
                enumerate([(10, SITE_A), (5000, SITE_B), (30, SITE_A), (20, SITE_A)])])
    groups = group_by_site(acct.processes[PID].ended)
    assert [(g.site, g.bytes, [a.size for a in g.allocations]) for g in groups] == [
        (SITE_B, 5000, [5000]), (SITE_A, 60, [30, 20, 10])]


def test_timeline_is_thinned_but_peak_kept():
    calls = []
    for i in range(6000):
        calls.append(malloc(10 * i, 0x1000, 100 if i != 4321 else 10_000))
        calls.append(free(10 * i + 5, 0x1000))
    acct = run(calls, exit_at=None)
    p = acct.processes[PID]
    assert len(p.timeline) <= 4096 and p.peak_total == 10_000 and p.peak_ns == 43210 + 10
