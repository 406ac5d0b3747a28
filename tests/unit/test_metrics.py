"""The metrics model fed with Calls: counts, errors, latency buckets, bytes by
direction, live bytes, the process cap. No root, no exporter."""

from __future__ import annotations

from cudaprobe.analysis.labels import OTHER
from cudaprobe.analysis.memtrack import ROLES
from cudaprobe.analysis.metrics import COPIES, EXIT_SLACK_NS, LATENCY_BOUNDS_S, MEMSETS, CallMetrics
from cudaprobe.analysis.summary import Summary
from cudaprobe.catalogue.functions import FUNCTIONS
from cudaprobe.decode.calls import Call
from cudaprobe.output.metrics_sink import MetricsSink
from cudaprobe.targets.jobs import NO_JOB as J

MiB = 1 << 20
S = 1_000_000_000
ERR = {"runtime": "cudaErrorInsufficientDriver", "driver": "CUDA_ERROR_NO_DEVICE"}


def call(event: str, t: int = 0, dur: int | None = 1_000, ret: int = 0, process: str = "app",
         pid: int = 100, api: str = "runtime", **args) -> Call:
    return Call(time_ms=t / 1e6, ts_ns=t, pid=pid, tid=pid + 1, process=process, event=event,
                api=api, category="x", duration_ns=dur, ret=None if dur is None else ret,
                ret_name=None if dur is None else (ERR[api] if ret else "cudaSuccess"),
                args=args, details="")


def metrics(alive=lambda pid: True, **kw) -> CallMetrics:
    return CallMetrics(alive=alive, **kw)


def test_calls_counted_per_function_api_and_process():
    m = metrics()
    m.add([call("cudaMalloc", ret=35, size=MiB), call("cudaMalloc", process="other_app"),
           call("cudaLaunchKernel", ret=35), call("cuMemAlloc_v2", api="driver", ret=100)])
    m.add([call("cudaMalloc", ret=35, size=MiB)])
    snap = m.snapshot(now_ns=10 * S)
    assert snap.calls == {("cudaMalloc", "runtime", "app", *J): 2,
                          ("cudaMalloc", "runtime", "other_app", *J): 1,
                          ("cudaLaunchKernel", "runtime", "app", *J): 1,
                          ("cuMemAlloc_v2", "driver", "app", *J): 1}
    assert snap.errors == {("cudaMalloc", "cudaErrorInsufficientDriver", "app", *J): 2,
                           ("cudaLaunchKernel", "cudaErrorInsufficientDriver", "app", *J): 1,
                           ("cuMemAlloc_v2", "CUDA_ERROR_NO_DEVICE", "app", *J): 1}


def test_calls_still_in_flight_at_the_end_are_not_counted():
    m = metrics()
    m.add([call("cudaDeviceSynchronize", dur=None)])
    snap = m.snapshot(now_ns=S)
    assert snap.calls == {} and snap.latency == {}


def test_latency_buckets_hold_each_duration_once_with_le_inclusive():
    m = metrics()
    # exactly on a bound (1 µs) is in that bucket; 1 ns above it is in the next
    durations = [500, 1_000, 1_001, 3_000_000, 60 * S]
    m.add([call("cudaMemcpy", dur=d) for d in durations])
    h = m.snapshot(now_ns=100 * S).latency[("cudaMemcpy", "runtime")]
    assert len(h.counts) == len(LATENCY_BOUNDS_S) + 1
    assert h.count == 5 and sum(h.counts) == 5
    assert h.sum_s == sum(durations) / 1e9
    at = {b: i for i, b in enumerate(LATENCY_BOUNDS_S)}
    assert h.counts[at[1e-6]] == 2  # 500 ns and 1 µs
    assert h.counts[at[2.5e-6]] == 1  # 1.001 µs
    assert h.counts[at[5e-3]] == 1  # 3 ms
    assert h.counts[-1] == 1  # a minute: above every bound


def test_bytes_copied_by_direction_only_for_calls_that_succeeded():
    m = metrics()
    m.add([
        call("cudaMemcpy", count=4096, kind="HostToDevice"),
        call("cudaMemcpy_ptds", count=100, kind="HostToDevice"),
        call("cudaMemcpyAsync_ptsz", count=123, kind="DeviceToHost"),
        call("cudaMemcpy", ret=35, count=MiB, kind="HostToDevice"),  # failed: nothing copied
        call("cudaMemcpy2D", width=64, height=3, kind="DeviceToDevice", dpitch=128, spitch=128),
        call("cudaMemcpyPeer", count=10),
        call("cuMemcpyHtoD_v2", api="driver", ByteCount=4096),
        call("cuMemcpyDtoHAsync_v2_ptsz", api="driver", ByteCount=7),
        call("cuMemcpy", api="driver", ByteCount=5),
    ])
    snap = m.snapshot(now_ns=S)
    assert snap.memcpy_bytes == {("HostToDevice", "runtime"): 4196,
                                 ("DeviceToHost", "runtime"): 123,
                                 ("DeviceToDevice", "runtime"): 192 + 10,
                                 ("HostToDevice", "driver"): 4096,
                                 ("DeviceToHost", "driver"): 7,
                                 ("Default", "driver"): 5}


def test_memset_bytes_count_elements_times_their_width():
    m = metrics()
    m.add([call("cudaMemset", count=256, value=7), call("cudaMemsetAsync", ret=35, count=MiB),
           call("cuMemsetD8_v2", api="driver", N=3), call("cuMemsetD16_v2", api="driver", N=3),
           call("cuMemsetD32Async_ptsz", api="driver", N=3)])
    assert m.snapshot(now_ns=S).memset_bytes == {"runtime": 256, "driver": 3 + 6 + 12}


def test_copy_and_memset_tables_name_catalogue_functions_and_their_arguments():
    by_name = {f.name: f for f in FUNCTIONS}
    for name, (sizes, kind) in COPIES.items():
        args = {a.name for a in by_name[name].args}
        assert set(sizes) <= args and (kind in args or kind[0].isupper()), name
    for name, (count, width) in MEMSETS.items():
        assert count in {a.name for a in by_name[name].args} and width in (1, 2, 4), name
    transfers = {f.name for f in FUNCTIONS if f.category == "transfer"}
    # every copy whose size is a plain argument is counted; the rest (2D/3D by
    # struct, arrays, batches: the generated catalogue) are not yet
    assert set(COPIES) <= transfers
    assert {"cudaMemcpy", "cudaMemcpyAsync", "cuMemcpyHtoD", "cuMemcpyDtoHAsync"} <= set(COPIES)


def test_live_bytes_follow_allocations_frees_and_process_exit():
    gone: set[int] = set()
    m = metrics(alive=lambda pid: pid not in gone, clock=lambda: 0)  # fed at 0, then idle
    m.add([call("cudaMalloc", t=0, devPtr="0x1000", size=MiB),
           call("cudaMalloc", t=10, devPtr="0x2000", size=2 * MiB),
           call("cudaMallocHost", t=20, ptr="0x3000", size=MiB),
           call("cudaMalloc", t=30, ret=35, devPtr="0x0", size=8 * MiB),  # failed: nothing
           call("cudaFree", t=40, devPtr="0x1000"),
           call("cudaMalloc", t=50, pid=200, process="other_app", devPtr="0x1000", size=5)])
    live = m.snapshot(now_ns=S).live_bytes
    assert live[("app", *J, "device")] == 2 * MiB and live[("app", *J, "host-pinned")] == MiB
    assert live[("other_app", *J, "device")] == 5 and live[("app", *J, "managed")] == 0
    gone.add(200)
    live = m.snapshot(now_ns=2 * S).live_bytes
    assert ("other_app", *J, "device") not in live and live[("app", *J, "device")] == 2 * MiB


def test_live_bytes_count_an_allocation_once_with_both_apis_probed():
    m = metrics(clock=lambda: 0)  # fed at 0: scraped at S, nothing fed for a second
    # the runtime's cudaMalloc serves itself with cuMemAlloc_v2 on the same thread
    m.add([call("cuMemAlloc_v2", t=10, dur=50, api="driver", dptr="0x1000", bytesize=MiB)])
    m.add([call("cudaMalloc", t=0, dur=100, devPtr="0x1000", size=MiB)])
    assert m.snapshot(now_ns=S).live_bytes[("app", *J, "device")] == MiB


def test_a_scrape_with_the_decoder_behind_still_finds_the_runtime_call_around_a_driver_call():
    """On a busy node the decoder reads a runtime call's return a poll after the
    driver call inside it, the clock seconds past both. A scrape between the two
    reads leaves the driver call held (the decoder has not come HOLD_NS past it):
    one allocation, not two."""
    now = [20 * S]  # the clock: seconds after both calls returned
    m = metrics(clock=lambda: now[0])
    m.add([call("cuMemAlloc_v2", t=10 * S + 10, dur=50, api="driver", dptr="0x1000",
                bytesize=MiB)])
    m.snapshot(now_ns=now[0])  # a scrape between the two reads
    now[0] += S // 10  # the next poll
    m.add([call("cudaMalloc", t=10 * S, dur=100, devPtr="0x1000", size=MiB)])
    now[0] += S  # nothing more came: all applied
    assert m.snapshot(now_ns=now[0]).live_bytes[("app", *J, "device")] == MiB
    counts = m._memory.processes[100].counts
    assert (counts["allocations"], counts["nested_driver_calls"], counts["replaced"]) == (1, 1, 0)


def test_live_bytes_by_kind_vmm_pool_and_registered():
    m = metrics(clock=lambda: 0)  # fed at 0: scraped at S, nothing fed for a second
    m.add([call("cuMemCreate", t=0, api="driver", handle="0x55aa00", size=20 * MiB, prop="0x1",
                flags=0),
           call("cuMemMap", t=10, api="driver", ptr="0x7f2000000000", size=20 * MiB, offset=0,
                handle="0x55aa00", flags=0),
           call("cuMemRelease", t=20, api="driver", handle="0x55aa00"),  # mapped: still there
           call("cudaMallocFromPoolAsync", t=30, ptr="0x7e4000000000", size=4096,
                memPool="0x9", stream="0x0"),
           call("cudaHostRegister", t=40, ptr="0x560000", size=MiB, flags=0)])
    live = m.snapshot(now_ns=S).live_bytes
    assert (live[("app", *J, "vmm")], live[("app", *J, "async-pool")],
            live[("app", *J, "host-registered")],
            live[("app", *J, "device")]) == (20 * MiB, 4096, MiB, 0)


def test_live_bytes_wait_for_the_hold_then_apply_without_a_scrape():
    m = metrics()
    m.add([call("cudaMalloc", t=0, devPtr="0x1000", size=MiB)])
    assert m.snapshot(now_ns=1_000_000).live_bytes == {}  # held: its runtime caller may come
    m2 = metrics()
    m2.add([call("cudaMalloc", t=0, devPtr="0x1000", size=MiB)])
    m2.add([call("cudaGetDevice", t=S)])  # a later batch applies what was held
    assert m2._memory.processes[100].live_bytes["device"] == MiB


def test_process_labels_are_capped_and_the_rest_is_other():
    m = metrics(max_processes=2)
    m.add([call("cudaFree", process=name) for name in ("a", "b", "c", "d", "a")])
    calls = m.snapshot(now_ns=S).calls
    assert calls == {("cudaFree", "runtime", "a", *J): 2, ("cudaFree", "runtime", "b", *J): 1,
                     ("cudaFree", "runtime", OTHER, *J): 2}


def test_lost_counters_keep_the_causes_not_the_wakeups():
    m = metrics()
    started = []
    sink = MetricsSink(m, lambda: started.append(True))
    sink.start()
    assert started == [True]
    m.set_lost({"ringbuf_full": 3, "wakeups": 90, "decode_errors": 0})
    assert m.snapshot(now_ns=S).lost == {"ringbuf_full": 3, "decode_errors": 0}
    sink.calls([call("cudaFree")])
    sink.finish(Summary(lost={"ringbuf_full": 4, "wakeups": 99}))
    snap = m.snapshot(now_ns=S)
    assert snap.lost == {"ringbuf_full": 4} and sum(snap.calls.values()) == 1


def test_snapshot_is_a_copy():
    m = metrics()
    m.add([call("cudaFree")])
    snap = m.snapshot(now_ns=S)
    m.add([call("cudaFree")])
    assert snap.calls[("cudaFree", "runtime", "app", *J)] == 1
    assert snap.latency[("cudaFree", "runtime")].count == 1


def test_memory_roles_are_not_counted_as_bytes_copied():
    assert not set(ROLES) & (set(COPIES) | set(MEMSETS))


def test_a_process_seen_gone_keeps_what_it_held_until_its_last_calls_are_fed():
    """On a busy node the decoder runs behind the calls: a process is seen gone
    (at 20 s) while calls it made before its exit are still to be fed (5-15 s).
    Those count as its own (its frees applied, nothing taken as leaked) until the
    calls fed have passed the moment it was seen gone; then what it held goes."""
    now = [0]
    gone: set[int] = set()
    m = metrics(alive=lambda pid: pid not in gone, clock=lambda: now[0])
    m.add([call("cudaMalloc", t=1 * S, devPtr="0x1000", size=MiB),
           call("cudaMalloc", t=2 * S, devPtr="0x2000", size=MiB),
           call("cudaMalloc", t=3 * S, pid=200, process="busy", devPtr="0x9000", size=1)])
    gone.add(100)
    for t in (5, 10, 15):  # fed behind: the clock is at 20 s
        now[0] = 20 * S
        m.add([call("cudaMalloc", t=t * S, pid=200, process="busy", devPtr=hex(t), size=1)])
    now[0] = 20 * S
    m.add([call("cudaFree", t=16 * S, devPtr="0x1000"),  # made before the exit
           call("cudaMalloc", t=17 * S, pid=200, process="busy", devPtr="0x11", size=1)])
    live = m.snapshot(now_ns=20 * S).live_bytes
    assert live[("app", *J, "device")] == MiB  # its free applied; the rest still held
    now[0] = 21 * S
    m.add([call("cudaMalloc", t=20 * S + EXIT_SLACK_NS, pid=200, process="busy", devPtr="0x10",
                size=1)])
    live = m.snapshot(now_ns=21 * S).live_bytes
    # busy's call at 20.1 s is the decoder's latest: held (a driver call's runtime
    # call may still come), so 5 of its 6 allocations are live
    assert ("app", *J, "device") not in live and live[("busy", *J, "device")] == 5
