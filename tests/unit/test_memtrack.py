"""Memory accounting over recorded call sequences: what is counted, deduplicated,
freed, leaked, and how leaks are grouped. No root, no BPF."""

from __future__ import annotations

from cudaprobe.analysis.memtrack import (
    ALLOC,
    DEVICE,
    MANAGED,
    PINNED,
    PROCESS_EXIT,
    REGISTERED,
    ROLES,
    MemCall,
    MemoryAccounting,
    group_by_site,
    memory_functions,
)
from cudaprobe.catalogue import functions as catalogue

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
    """Arguments by the headers' names; what an allocation returns is an
    out-parameter, but for a registration, which pins the caller's pointer."""
    for name, role in ROLES.items():
        fns = [f for f in catalogue.FUNCTIONS if f.name == name]
        assert fns, name
        for fn in fns:
            args = {a.name: a for a in fn.args}
            for arg in (*role.size, *role.asked, role.pointer, role.handle):
                assert arg is None or arg in args, (name, arg)
            if role.action == ALLOC:
                assert args[role.pointer].is_out == (role.kind != REGISTERED), name
            elif role.pointer:
                assert not args[role.pointer].is_out, name
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


def test_a_decoder_behind_the_clock_still_finds_the_runtime_call_around_a_driver_call():
    """Under load the decoder reads a runtime call's return a poll after the driver
    call inside it, the clock already far past both: the driver call waits for
    the decoder to come hold_ns past it, not the clock (one allocation, not two)."""
    acct = MemoryAccounting(hold_ns=1000)
    wall = 1_000_000  # the clock: 1 ms after both calls returned
    acct.feed([call("cuMemAlloc_v2", 150, 20, dptr=hex(0xD000), bytesize=MiB)], wall)
    acct.settle_live(wall)
    acct.feed([malloc(100, 0xD000, MiB, dur=100)], wall + 500)  # the next poll
    acct.settle_live(wall + 500)
    acct.settle_live(wall + 500 + 1000)  # nothing more came for hold_ns: all applied
    p = acct.processes[PID]
    assert p.counts["nested_driver_calls"] == 1 and p.counts["allocations"] == 1
    assert p.live_total == MiB


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
                            "managed": 0, "async-pool": 0, "vmm": 0, "host-registered": 0}
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


# virtual memory (PyTorch's expandable segments), pools, host registration

GiB, CHUNK = 1 << 30, 20 * MiB
VA = 0x7F10_0000_0000  # a reservation (cuMemAddressReserve: no memory of its own)


def create(t, handle, size, **kw):
    return call("cuMemCreate", t, handle=hex(handle), size=size, prop="0x7ffd0000", flags=0,
                **kw)


def mem_map(t, va, size, handle, **kw):
    return call("cuMemMap", t, ptr=hex(va), size=size, offset=0, handle=hex(handle), flags=0,
                **kw)


def test_vmm_expandable_segment_grows_and_shrinks():
    """As PyTorch's expandable segments do: a chunk made and mapped after the
    last one at each growth; on shrink, unmapped then released."""
    calls = [call("cuMemAddressReserve", 10, ptr=hex(VA), size=GiB, alignment=0, addr="0x0",
                  flags=0)]
    for i in range(5):
        calls += [create(100 + 40 * i, 0x5500 + i, CHUNK),
                  mem_map(110 + 40 * i, VA + i * CHUNK, CHUNK, 0x5500 + i),
                  call("cuMemSetAccess", 120 + 40 * i, ptr=hex(VA + i * CHUNK), size=CHUNK,
                       desc="0x7ffd", count=1)]
    calls += [call("cuMemUnmap", 400, ptr=hex(VA + 3 * CHUNK), size=2 * CHUNK),  # the last two
              call("cuMemRelease", 410, handle=hex(0x5503)),
              call("cuMemRelease", 420, handle=hex(0x5504))]
    p = run(calls, exit_at=None).processes[PID]
    assert p.peak_bytes["vmm"] == p.peak_total == 5 * CHUNK
    assert p.live_bytes["vmm"] == p.live_total == 3 * CHUNK
    assert (p.counts["allocations"], p.counts["frees"]) == (5, 2)
    # the unmap frees nothing yet: each release does
    assert [n for _, n in p.timeline] == [CHUNK * k for k in (1, 2, 3, 4, 5, 4, 3)]
    assert sorted(p.mapped) == [VA, VA + CHUNK, VA + 2 * CHUNK]


def test_vmm_memory_lives_until_released_and_unmapped_in_either_order():
    """NVIDIA's samples release the handle right after mapping it: the memory
    stays until it is unmapped. A handle mapped twice needs both unmapped."""
    p = run([create(100, 0xA1, 2 * MiB), mem_map(110, VA, 2 * MiB, 0xA1),
             call("cuMemRelease", 120, handle=hex(0xA1)),  # still mapped: still allocated
             create(130, 0xA2, 4 * MiB), mem_map(140, VA + 8 * MiB, 4 * MiB, 0xA2),
             mem_map(150, VA + 16 * MiB, 4 * MiB, 0xA2),  # one handle, two addresses
             call("cuMemUnmap", 160, ptr=hex(VA + 8 * MiB), size=4 * MiB),
             call("cuMemRelease", 170, handle=hex(0xA2)),  # still mapped once
             ], exit_at=None).processes[PID]
    assert p.live_bytes["vmm"] == 6 * MiB and p.counts["frees"] == 2
    p2 = run([create(100, 0xA1, 2 * MiB), mem_map(110, VA, 2 * MiB, 0xA1),
              call("cuMemRelease", 120, handle=hex(0xA1)),
              call("cuMemUnmap", 200, ptr=hex(VA), size=2 * MiB)], exit_at=None).processes[PID]
    assert p2.live_total == 0 and p2.counts["bytes_freed"] == 2 * MiB
    assert p2.timeline == [(110, 2 * MiB), (210, 0)]  # freed by the unmap, not the release


def test_vmm_leaks_say_what_kept_the_memory():
    acct = run([create(100, 0xB1, MiB, site=SITE_A),  # never mapped nor released
                create(110, 0xB2, 2 * MiB, site=SITE_B), mem_map(120, VA, 2 * MiB, 0xB2),
                call("cuMemRelease", 130, handle=hex(0xB2)),  # released, left mapped
                create(140, 0xB3, 4 * MiB, site=SITE_B), mem_map(150, VA + 4 * MiB, 4 * MiB, 0xB3),
                call("cuMemRelease", 160, handle=hex(0xB4)),  # not a handle made here
                call("cuMemMap", 170, ptr=hex(VA + GiB), size=MiB, offset=0, handle=hex(0xB5),
                     flags=0)])
    p = acct.processes[PID]
    assert (p.counts["unknown_frees"], p.counts["unknown_maps"]) == (1, 1)
    groups = [(g.site, g.kind, g.outstanding, g.bytes, [a.ptr for a in g.allocations])
              for g in group_by_site(p.ended)]
    assert groups == [(SITE_B, "vmm", "not released, mapped at 1 address", 4 * MiB, [0xB3]),
                      (SITE_B, "vmm", "mapped at 1 address", 2 * MiB, [0xB2]),
                      (SITE_A, "vmm", "not released", MiB, [0xB1])]


def test_vmm_failed_calls_change_nothing_and_handles_are_not_pointers():
    p = run([call("cuMemCreate", 100, ret=2, handle=None, size=GiB, prop="0x1", flags=0),
             create(110, 0xC000, MiB),
             malloc(120, 0xC000, 64),  # the same number as a pointer: another thing
             call("cuMemMap", 130, ret=1, ptr=hex(VA), size=MiB, offset=0, handle=hex(0xC000),
                  flags=0),
             call("cuMemRelease", 140, ret=1, handle=hex(0xC000)),
             free(150, 0xC000)], exit_at=None).processes[PID]
    assert p.counts["failed_allocations"] == 1 and p.counts["bytes_failed"] == GiB
    assert (p.counts["failed_maps"], p.counts["failed_frees"]) == (1, 1)
    assert p.live_bytes["vmm"] == MiB and p.live_bytes["device"] == 0 and not p.mapped


def test_pools_and_registered_host_memory_by_kind_once_at_either_layer():
    acct = run([
        # cudaHostRegister [100, 200] serves itself with cuMemHostRegister_v2
        call("cuMemHostRegister_v2", 150, 20, p=hex(0x5600_0000), bytesize=MiB, Flags=0),
        call("cudaHostRegister", 100, 100, ptr=hex(0x5600_0000), size=MiB, flags=0),
        call("cuMemAllocFromPoolAsync_ptsz", 350, 20, dptr=hex(0x7E40_0000), bytesize=4096,
             pool="0x99", hStream="0x0"),
        call("cudaMallocFromPoolAsync_ptsz", 300, 100, ptr=hex(0x7E40_0000), size=4096,
             memPool="0x99", stream="0x0"),
        call("cuMemAllocFromPoolAsync", 500, tid=9, dptr=hex(0x7E50_0000), bytesize=8192,
             pool="0x99", hStream="0x0"),  # the program's own driver call
        call("cuMemHostRegister_v2", 600, tid=9, p=hex(0x5700_0000), bytesize=2 * MiB, Flags=0),
        call("cudaHostUnregister", 700, ptr=hex(0x5600_0000)),
        call("cudaHostRegister", 800, ret=1, ptr=hex(0x5800_0000), size=MiB, flags=0),
        call("cuMemFreeAsync", 900, tid=9, dptr=hex(0x7E50_0000), hStream="0x0"),
    ], exit_at=None)
    p = acct.processes[PID]
    assert p.counts["nested_driver_calls"] == 2
    assert p.live_bytes["host-registered"] == 2 * MiB and p.live_bytes["async-pool"] == 4096
    assert p.peak_bytes["host-registered"] == 3 * MiB and p.peak_bytes["async-pool"] == 4096 + 8192
    assert (p.counts["allocations"], p.counts["frees"], p.counts["failed_allocations"]) == (4, 2, 1)


def test_arguments_read_as_numbers_however_decoded():
    """After the catalogue is generated from the headers a handle may decode as an
    int; hex text and decimal text read the same."""
    p = run([call("cuMemCreate", 100, handle=0xD1, size="4096", prop=0, flags=0),
             call("cuMemMap", 110, ptr=VA, size=4096, offset=0, handle="209", flags=0),
             call("cuMemUnmap", 120, ptr=str(VA), size=4096),
             call("cuMemRelease", 130, handle="0XD1")], exit_at=None).processes[PID]
    assert p.peak_bytes["vmm"] == 4096 and p.live_total == 0 and p.counts["frees"] == 1
