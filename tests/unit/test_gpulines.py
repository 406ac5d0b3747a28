"""serve --gpu-time --py-stacks: CUPTI's records joined, as they come, to the
launches traced, and kernels' GPU time counted by Python line: the join's
rules (outermost launch, pending records, clock alignment, --duty spans),
its bounds, and the metric's labels. No root, no GPU: the records are made
here as the reader would hand them over."""

from __future__ import annotations

import threading

import pytest

from cudaprobe.analysis import gpulines
from cudaprobe.analysis.gpulines import LineJoin
from cudaprobe.analysis.metrics import MAX_LINES, CallMetrics
from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import ALIGN_MIN_VOTES, ApiCall, GpuWork
from cudaprobe.decode.pystacks import PyStack
from cudaprobe.targets.jobs import NO_JOB as J

S = 1_000_000_000
FILE = "/home/u/train.py"


def stack(line: int, function: str = "step", forward: int | None = None) -> PyStack:
    frames = [{"file": "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py",
               "line": 125, "function": "forward"},
              {"file": FILE, "line": line, "function": function}]
    fwd = [{"file": FILE, "line": forward, "function": "model"}] if forward else None
    return PyStack(frames, cut=False, forward=fwd)


def launch(t: int, line: int | None, pid: int = 100, tid: int = 101, dur: int = 4_000,
           event: str = "cuLaunchKernel", process: str = "python3", forward: int | None = None
           ) -> Call:
    c = Call(time_ms=t / 1e6, ts_ns=t, pid=pid, tid=tid, process=process, event=event,
             api="driver", category="kernel", duration_ns=dur, ret=0, ret_name="CUDA_SUCCESS",
             args={}, details="")
    c.py_stack = stack(line, forward=forward) if line is not None else None
    return c


def api_of(c: Call, shift: int = 0) -> ApiCall:
    """CUPTI's record of the call: inside it, as the library reads it."""
    return ApiCall(c.tid, c.ts_ns + 1_000 + shift, c.ts_ns + c.duration_ns - 1_000 + shift,
                   c.event)


def kernel(c: Call, correlation: int, ns: int, pid: int | None = None) -> GpuWork:
    end = c.ts_ns + c.duration_ns
    return GpuWork(pid or c.pid, "kernel", end + 5_000, end + 5_000 + ns, 0, 1, 7, correlation,
                   "k")


def line(n: int, function: str = "step") -> str:
    return f"{FILE}:{n} ({function})"


def served(**kw) -> tuple[CallMetrics, LineJoin]:
    m = CallMetrics(alive=lambda pid: True, clock=lambda: 100 * S, **kw)
    return m, m.python_lines()


def test_kernels_counted_by_the_line_of_their_launch_and_backward_on_its_forward_line():
    m, join = served()
    calls = [launch(S + i * 10_000, 40 if i % 3 else 41) for i in range(30)]
    calls.append(launch(S + 400_000, 60, forward=41))  # a backward launch: its forward's line
    m.add(calls)
    for n, c in enumerate(calls):
        join.api(c.pid, n, api_of(c))
    m.add_gpu([kernel(c, n, 1_000 + n) for n, c in enumerate(calls)])
    snap = m.snapshot(now_ns=100 * S)
    want40 = sum(1_000 + n for n in range(30) if n % 3)
    want41 = sum(1_000 + n for n in range(30) if not n % 3)
    assert snap.gpu_lines == {(line(40), "python3", *J): want40 / 1e9,
                              (line(41), "python3", *J): want41 / 1e9,
                              (line(41, "model"), "python3", *J): 1_030 / 1e9}
    assert snap.gpu_lines_unjoined == {"no_traced_launch": 0, "bound": 0, "no_api_record": 0}


def test_a_runtime_launch_holds_its_driver_launch_and_the_kernel_is_counted_once():
    m, join = served()
    outer = launch(S, 10, event="cudaLaunchKernel", dur=10_000)
    inner = launch(S + 2_000, 10, event="cuLaunchKernel", dur=5_000)
    m.add([outer, inner])
    join.api(100, 1, ApiCall(101, S + 1_000, S + 9_000, "cudaLaunchKernel"))
    m.add_gpu([kernel(outer, 1, 2_500)])
    assert m.snapshot(now_ns=100 * S).gpu_lines == {(line(10), "python3", *J): 2.5e-6}


def test_a_launch_with_no_python_frame_and_untraced_records():
    m, join = served()
    c = launch(S, None)
    m.add([c])
    join.api(100, 1, api_of(c))
    join.api(100, 2, ApiCall(101, S // 2, S // 2 + 100, "cuLaunchKernel"))  # not traced
    join.api(100, 3, ApiCall(101, S // 2, S // 2 + 100, "cuMemcpyHtoD"))  # no kernel: skipped
    m.add_gpu([kernel(c, 1, 700), kernel(c, 2, 900)])
    snap = m.snapshot(now_ns=100 * S)
    assert snap.gpu_lines == {("(no Python frame)", "python3", *J): 7e-7}
    assert snap.gpu_lines_unjoined == {"no_traced_launch": 1, "bound": 0, "no_api_record": 0}


def test_a_record_read_before_its_launch_is_decoded_waits_for_it():
    m, join = served()
    early = launch(99 * S, 5)  # (the clock reads 100 s)
    m.add([early])
    late = launch(99 * S + S // 2, 6)  # made: its record read before the decoder reached it
    join.api(100, 2, api_of(late))
    m.add_gpu([kernel(late, 2, 300)])
    assert m.snapshot(now_ns=100 * S).gpu_lines == {}
    m.add([late])
    m.add_gpu([])  # the next read: the record joined, the kernel read before counted
    assert m.snapshot(now_ns=100 * S).gpu_lines == {(line(6), "python3", *J): 3e-7}


def test_a_record_whose_launch_never_comes_is_let_go_once_the_decoder_is_idle():
    join = LineJoin()
    c = launch(S, 5)
    join.launch(c, 1, ("python3", *J))
    join.api(100, 9, ApiCall(101, 3 * S, 3 * S + 10, "cuLaunchKernel"))
    join.settle(3 * S)  # the decoder last moved now
    assert join.settle(3 * S + gpulines.PENDING_NS - 1) == [] and join.unjoined == 0
    join.settle(3 * S + gpulines.PENDING_NS)
    assert join.unjoined == 1 and not join._pending


def test_kernels_wait_for_a_decoder_running_seconds_behind_and_count_once_joined():
    """CUPTI's records read long before their launches are decoded (a busy
    node): the records wait while the decoder moves on, the kernels wait for
    their records; each counts once, when its launch is decoded."""
    m, join = served()
    calls = [launch(50 * S + i * 10_000_000, 30 + i % 2) for i in range(300)]  # 3 s of them
    for n, c in enumerate(calls):
        join.api(100, n, api_of(c))
    m.add_gpu([kernel(c, n, 100) for n, c in enumerate(calls)])
    for i in range(0, 300, 50):  # the decoder catches up, a read at a time
        m.add(calls[i:i + 50])
        m.add_gpu([])
    snap = m.snapshot(now_ns=100 * S)
    assert snap.gpu_lines == {(line(30), "python3", *J): 150 * 100 / 1e9,
                              (line(31), "python3", *J): 150 * 100 / 1e9}
    assert snap.gpu_lines_unjoined == {"no_traced_launch": 0, "bound": 0, "no_api_record": 0}
    assert not join._waiting and not join._pending


def test_a_kernel_whose_api_record_never_comes_is_counted_as_such():
    m, join = served()
    c = launch(S, 5)
    m.add([c])
    m.add_gpu([kernel(c, 77, 100)])
    m.add_gpu([])
    assert m.snapshot(now_ns=100 * S).gpu_lines_unjoined["no_api_record"] == 0  # may come
    m.add([launch(S + gpulines.WAIT_NS + S, 5)])  # the decoder far past it: none will
    m.add_gpu([])
    assert m.snapshot(now_ns=100 * S).gpu_lines_unjoined["no_api_record"] == 1
    assert not join._waiting


def test_a_process_in_cupti_s_clock_is_joined_once_its_records_agree_on_the_offset():
    pid, shift = 300, 123_456  # its records are late by this much on the probes' clock
    join = LineJoin(cupti_clock={pid})
    gaps = [20_000 + (i * 7919) % 60_000 for i in range(ALIGN_MIN_VOTES * 3)]  # irregular
    calls = [launch(S + sum(gaps[:i]), 7 + i % 2, pid=pid) for i in range(len(gaps))]
    for c in calls:
        join.launch(c, 1, ("python3", *J))
    for n, c in enumerate(calls):
        join.api(pid, n, api_of(c, shift=-shift))
    assert all(join.launch_of(kernel(c, n, 10)) is gpulines.WAITING for n, c in enumerate(calls))
    late = join.settle(50 * S)  # aligned: each record on its own launch
    assert join._shift == {pid: shift}
    assert [w.correlation for w, _ in late] == list(range(len(calls)))
    assert [launch.ts_ns for _, launch in late] == [c.ts_ns for c in calls]


def test_a_process_in_cupti_s_clock_aligns_on_its_own_launches_with_the_decoder_behind():
    """On a busy node the decoder runs behind CUPTI: a process's records come
    before its launches are decoded. Those records neither vote nor decide how:
    once the launches are in, the offset is the true one, not that to a
    neighbouring launch of a step whose launches are evenly spaced."""
    pid, shift = 300, 300_000
    join = LineJoin(cupti_clock={pid})
    calls, records = [], []
    for step in range(6):
        for k in range(13):  # a step: 13 launches 40 us apart, every 4th a cuBLAS one
            t = S + step * 19_000_000 + k * 40_000
            event = "cuLaunchKernelEx" if k % 4 == 0 else "cuLaunchKernel"
            c = launch(t, 7 + k, pid=pid, dur=8_000, event=event)
            calls.append(c)
            if event == "cuLaunchKernelEx":  # the driver's own record, inside the call
                records.append(ApiCall(c.tid, t + 1_000 - shift, t + 7_000 - shift, event))
            else:  # the runtime's record, holding the driver call traced
                records.append(ApiCall(c.tid, t - 1_500 - shift, t + 9_500 - shift,
                                       "cudaLaunchKernel"))
    for n, r in enumerate(records):
        join.api(pid, n, r)
    assert join.settle(2 * S) == [] and join._shift == {}  # nothing decoded: it waits
    for c in calls:
        join.launch(c, 1, ("python3", *J))
    join.settle(2 * S)
    assert join._shift == {pid: shift}
    assert [join.launch_of(kernel(c, n, 10)).ts_ns for n, c in enumerate(calls)] == \
        [c.ts_ns for c in calls]
    assert join.unjoined == 0


def test_with_duty_only_the_records_inside_a_slice_are_looked_at():
    now = [100 * S]
    m = CallMetrics(alive=lambda pid: True, clock=lambda: now[0])
    join = m.python_lines()
    m.window_traced()  # 100 s: the probes are in
    t = 100 * S + 1_000_000
    inside = launch(t, 3)
    m.add([inside])
    now[0] = t + 10_000_000
    m.window_ended()
    join.api(100, 1, api_of(inside))
    for n in range(2, 1000):  # records between slices: no launch can be found for them
        join.api(100, n, ApiCall(101, 200 * S + n, 200 * S + n + 10, "cuLaunchKernel"))
    assert not join._pending and join.unjoined == 0
    m.add_gpu([kernel(inside, 1, 800)] + [kernel(inside, n, 5) for n in range(2, 1000)])
    assert m.snapshot(now_ns=100 * S).gpu_lines == {(line(3), "python3", *J): 8e-7 * 1}
    assert not join._waiting  # the kernels of launches made between slices wait for nothing


def test_a_slice_is_told_by_the_time_it_began_and_ended_not_when_the_lock_was_free():
    """The reader holds the metrics' lock for a batch of records: a slice's
    start and end are the times they were told, however long the lock took."""
    now, read = [0], threading.Event()

    def clock() -> int:
        read.set()
        return now[0]
    m = CallMetrics(alive=lambda pid: True, clock=clock)
    join = m.python_lines()
    for told, at in ((m.window_traced, 100 * S), (m.window_ended, 101 * S)):
        now[0] = at
        read.clear()
        with m._lock:  # the reader, busy with a batch
            teller = threading.Thread(target=told)
            teller.start()
            read.wait(10)  # (a bound: the clock is read at once, before the lock)
            now[0] = at + 5 * S  # the lock comes free 5 s later
        teller.join()
    assert list(join._spans) == [(100 * S, 101 * S)]


def test_with_duty_each_kernel_stands_for_the_weight_of_its_launch():
    m, join = served()
    m.weight = 50  # --duty 2%
    m.spans.begin(0)  # a slice under way
    c = launch(S, 12)
    m.add([c])
    join.api(100, 1, api_of(c))
    m.add_gpu([kernel(c, 1, 1_000)])
    assert m.snapshot(now_ns=100 * S).gpu_lines == {(line(12), "python3", *J): 50e-6}


def test_each_process_keeps_its_busiest_lines_and_the_rest_is_other():
    m, join = served()
    n = 0
    for pid, name in ((100, "python3"), (200, "trainer")):
        calls = [launch(S + i * 10_000, 100 + i, pid=pid, tid=pid + 1, process=name)
                 for i in range(MAX_LINES + 5)]
        m.add(calls)
        for i, c in enumerate(calls):
            join.api(pid, n + i, api_of(c))
        m.add_gpu([kernel(c, n + i, 1_000 * (i + 1)) for i, c in enumerate(calls)])
        n += len(calls)
    m.snapshot(now_ns=100 * S)  # ranked
    calls = [launch(2 * S + i * 10_000, 100 + i, pid=200, tid=201, process="trainer")
             for i in range(MAX_LINES + 5)]
    m.add(calls)
    for i, c in enumerate(calls):
        join.api(200, n + i, api_of(c))
    m.add_gpu([kernel(c, n + i, 1_000 * (i + 1)) for i, c in enumerate(calls)])
    snap = m.snapshot(now_ns=100 * S)
    trainer = {k[0]: v for k, v in snap.gpu_lines.items() if k[1] == "trainer"}
    assert len(trainer) == MAX_LINES + 1
    top = [line(100 + i) for i in range(5, MAX_LINES + 5)]  # the most GPU time
    assert sorted(k for k in trainer if k != "other") == sorted(top)
    # the first read labelled the first lines seen, the rest in `other`; the ranking then
    # gave the labels to the busiest, the others counting in `other` since
    assert trainer["other"] == sum(1_000 * (i + 1) for i in [*range(10, 15), *range(5)]) / 1e9
    assert {k[1] for k in snap.gpu_lines} == {"python3", "trainer"}


def test_the_join_holds_what_is_needed_only_and_bounds_a_flood(monkeypatch):
    join = LineJoin()
    for i in range(100):
        join.launch(launch(S + i, 1), 1, ("python3", *J))
        join.api(100, i, api_of(launch(S + i, 1)))
    later = launch(S + gpulines.KEEP_NS + 10 * S, 1)  # the decoder is far past them now
    join.launch(later, 1, ("python3", *J))
    join.settle(later.ts_ns)
    assert join._kept == 1 and list(join._threads[(100, 101)]) == [
        t for t in join._threads[(100, 101)] if t.ts_ns == later.ts_ns]
    monkeypatch.setattr(gpulines, "MAX_KEPT", 1000)
    for i in range(3000):
        join.launch(launch(200 * S + i * 10_000, 1), 1, ("python3", *J))
    join.settle(200 * S)
    assert join._kept <= 1000 and join.dropped >= 2000
    monkeypatch.setattr(gpulines, "MAX_PENDING", 10)
    for i in range(50):  # records far beyond every launch decoded: wait, up to the bound
        join.api(100, 10_000 + i, ApiCall(101, 900 * S + i, 900 * S + i + 5, "cuLaunchKernel"))
    assert len(join._pending) == 10


def test_a_runtime_record_sharing_the_driver_record_s_id_does_not_undo_its_join():
    """Only the driver's launches traced (serve --api driver): CUPTI's driver
    record joins; the runtime record of the same id, whose call was not
    traced and which holds no whole launch, does not take the join back."""
    m, join = served()
    c = launch(S, 21, event="cuLaunchKernel", dur=3_000)
    m.add([c])
    join.api(100, 5, ApiCall(101, S + 500, S + 2_500, "cuLaunchKernel"))
    join.api(100, 5, ApiCall(101, S + 1_000, S + 2_000, "cudaLaunchKernel"))
    m.add_gpu([kernel(c, 5, 400)])
    assert m.snapshot(now_ns=100 * S).gpu_lines == {(line(21), "python3", *J): 4e-7}


def test_a_thread_decoded_behind_another_still_has_its_launches_joined():
    """The decoder gives each thread's calls in order, not the threads' in time
    order: a record of the main thread waits for the main thread's launches,
    though another thread's later ones are decoded already."""
    m, join = served()
    main = [launch(50 * S + i * 1_000_000, 40) for i in range(10)]
    other = launch(50 * S + 20_000_000, 41, tid=202)  # the autograd thread, 10 ms later
    m.add([other])
    for n, c in enumerate(main):
        join.api(100, n, api_of(c))
    m.add_gpu([kernel(c, n, 100) for n, c in enumerate(main)])
    assert join.unjoined == 0 and len(join._pending) == 10
    m.add(main)
    m.add_gpu([])
    assert m.snapshot(now_ns=100 * S).gpu_lines == {(line(40), "python3", *J): 10 * 100 / 1e9}
    assert join.unjoined == 0


def test_a_flood_of_records_before_the_decoder_keeps_the_oldest_which_align_first():
    """serve --duty 10% --py-stacks on an H100: the decoder ran seconds behind
    CUPTI, whose records of a process in its own clock came far more than the
    waiting bound before any of their launches were decoded. Letting the
    oldest go kept only records whose launches were never decoded in time:
    nothing was ever aligned or joined. The oldest are kept and vote as the
    decoder reaches them; the records let go meanwhile are counted."""
    pid, shift = 300, 77_000
    join = LineJoin(cupti_clock={pid})
    told = []
    join.on_aligned = lambda p, s: told.append((p, s))
    n = gpulines.MAX_UNALIGNED * 3
    gaps = [20_000 + (i * 7919) % 60_000 for i in range(n)]
    calls = [launch(S + sum(gaps[:i]), 7 + i % 2, pid=pid) for i in range(n)]
    for k, c in enumerate(calls):  # every record read before any launch is decoded
        join.api(pid, k, api_of(c, shift=-shift))
    assert join.settle(2 * S) == [] and join._shift == {}
    assert join.dropped == n - gpulines.MAX_UNALIGNED
    for c in calls:  # the decoder catches up
        join.launch(c, 1, ("python3", *J))
    join.settle(3 * S)
    join.settle(4 * S)
    assert join._shift == {pid: shift} and told == [(pid, shift)]  # told once
    kept = gpulines.MAX_UNALIGNED
    assert [join.launch_of(kernel(c, k, 10)).ts_ns for k, c in enumerate(calls[:kept])] == \
        [c.ts_ns for c in calls[:kept]]
    assert all(join.launch_of(kernel(c, k, 10)) is None for k, c in enumerate(calls)
               if k >= kept)
    # once aligned, a record joins at once
    later = launch(calls[-1].ts_ns + 50_000, 9, pid=pid)
    join.launch(later, 1, ("python3", *J))
    join.api(pid, n, api_of(later, shift=-shift))
    assert join.launch_of(kernel(later, n, 10)).ts_ns == later.ts_ns


def test_records_that_all_disagree_make_room_for_later_ones(monkeypatch):
    """Records whose launches are all decoded and still do not agree on an
    offset (too few of them met a launch) give way, the older half, so that a
    later run of records can align the process."""
    monkeypatch.setattr(gpulines, "MAX_UNALIGNED", 40)
    pid = 300
    join = LineJoin(cupti_clock={pid})
    far = [launch(S + i * 50_000_000, 7, pid=pid) for i in range(40)]  # apart, none agree
    for c in far:
        join.launch(c, 1, ("python3", *J))
    for k, c in enumerate(far):  # each record 1-40 ms off its launch: scattered votes
        join.api(pid, k, api_of(c, shift=-(k + 1) * 1_000_000))
    join.settle(10 * S)
    assert join._shift == {} and len(join._unaligned[pid]) == 20 and join.dropped == 20


def test_with_duty_every_kernel_counts_by_name_unscaled_and_by_line_only_from_a_slice():
    """CUPTI records all along (never switched with the slices): every kernel
    counts by kernel name once, unscaled, as it is read, whenever it was
    launched; by line only where its launch was traced in a slice, at weight
    1/fraction, whether its record came before or after it."""
    now = [0]
    m = CallMetrics(alive=lambda pid: True, clock=lambda: now[0])
    join = m.python_lines()
    m.weight = 20  # --duty 5%
    m.slices_only()
    before = launch(1 * S, 3)  # before the first slice
    m.add([before])
    join.api(100, 1, api_of(before))
    now[0] = 2 * S
    m.window_traced()
    inside, untraced = launch(2 * S + S // 5, 4), launch(2 * S + S // 3, 5)
    m.add([inside])  # `untraced`: its launch was not decoded as a call
    now[0] = 3 * S
    m.window_ended()
    between = launch(3 * S + S // 2, 6)
    m.add([between])
    join.api(100, 3, api_of(between))
    late = kernel(inside, 2, 3_000)
    now[0] = 4 * S
    m.add_gpu([kernel(before, 1, 1_000), kernel(between, 3, 7_000), late])
    snap = m.snapshot(now_ns=100 * S)
    assert {k: (h.count, h.sum_ns) for k, h in snap.gpu_time.items()} == {"k": (3, 11_000)}
    assert snap.gpu_lines == {}  # the slice's record has not come yet
    join.api(100, 2, api_of(inside))  # the record comes after its kernel
    join.api(100, 4, api_of(untraced))
    now[0] = 4 * S + 1
    m.add_gpu([kernel(untraced, 4, 500)])
    snap = m.snapshot(now_ns=100 * S)
    assert {k: (h.count, h.sum_ns) for k, h in snap.gpu_time.items()} == {"k": (4, 11_500)}
    assert snap.gpu_lines == {(line(4), "python3", *J): 3_000 * 20 / 1e9}


def test_with_duty_a_kernel_counts_by_line_only_if_its_launch_began_within_the_slice_s_length():
    """The probes come out function by function, on a loaded node as long as
    the slice or more: a launch traced while they do began past the slice's
    length and its kernel counts by no line (counted, each slice would count
    more than its length at 1/fraction), as a sampled call does not count; a
    launch within the length counts. By name, both count, once each."""
    now = [0]
    m = CallMetrics(alive=lambda pid: True, clock=lambda: now[0])
    join = m.python_lines()
    m.weight = 10  # --duty 10%
    m.spans.length_ns = S // 10  # a period of 1 s
    m.slices_only()
    now[0] = 5 * S
    m.window_traced()
    within, past = launch(5 * S + S // 20, 4), launch(5 * S + S // 5, 5)  # 50 ms, 200 ms in
    m.add([within, past])
    now[0] = 5 * S + S // 2  # the probes out 0.5 s after they went in
    m.window_ended()
    join.api(100, 1, api_of(within))
    join.api(100, 2, api_of(past))
    now[0] = 6 * S
    m.add_gpu([kernel(within, 1, 3_000), kernel(past, 2, 7_000)])
    snap = m.snapshot(now_ns=100 * S)
    assert {k: (h.count, h.sum_ns) for k, h in snap.gpu_time.items()} == {"k": (2, 10_000)}
    assert snap.gpu_lines == {(line(4), "python3", *J): 3_000 * 10 / 1e9}


def test_with_duty_a_process_in_cupti_s_clock_is_placed_in_its_slices_once_aligned():
    """Its records stamped 1.5 ms late on the probes' clock: the slice's last
    ones lie past its end as stamped, every one in it once aligned; they wait
    for the offset, then
    each joins its launch and its kernel counts by line; a record made after
    the slice, once aligned, is outside it: its kernel counts by no line. By
    name every kernel counts, once."""
    pid, shift = 300, -1_500_000  # CUPTI's clock 1.5 ms ahead
    now = [S]
    m = CallMetrics(alive=lambda pid: True, clock=lambda: now[0])
    join = m.python_lines()
    join.cupti_clock = {pid}
    m.weight = 10
    m.slices_only()
    m.window_traced()  # 1 s
    gaps = [20_000 + (i * 7919) % 60_000 for i in range(ALIGN_MIN_VOTES * 3)]
    calls = [launch(S + 1_000 + sum(gaps[:i]), 7 + i % 2, pid=pid) for i in range(len(gaps))]
    m.add(calls)
    now[0] = calls[-1].ts_ns + 10_000
    m.window_ended()
    after = launch(now[0] + 1_000_000, 9, pid=pid)
    m.add([after, launch(now[0] + 50_000_000, 9, pid=pid)])  # the decoder well past them
    for n, c in enumerate([*calls, after]):
        join.api(pid, n, api_of(c, shift=-shift))
    now[0] += 2 * S
    m.add_gpu([kernel(c, n, 1_000) for n, c in enumerate([*calls, after])])
    assert join._shift == {pid: shift}
    snap = m.snapshot(now_ns=now[0])
    assert {k: h.count for k, h in snap.gpu_time.items()} == {"k": len(calls) + 1}
    assert sum(snap.gpu_lines.values()) == pytest.approx(10 * len(calls) * 1e-6)
