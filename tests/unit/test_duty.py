"""serve --duty: the fraction read, the slice checked, and the cycle: off at
the start, then one slice a period (resume, pause), each slice counted, the
calls seen weighed by the period over the slice."""

from __future__ import annotations

import random
import re
import statistics
import time

import pytest
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, generate_latest

from cudaprobe.analysis.metrics import CallMetrics
from cudaprobe.decode.gputime import GpuWork
from cudaprobe.errors import UsageError
from cudaprobe.output.otlp_metrics import metrics_data
from cudaprobe.output.prometheus import CallCollector
from cudaprobe.sessions.duty import TIES_TAIL_S, DutyCycle, parse_duty

from .test_metrics import call

S = 1_000_000_000


@pytest.mark.parametrize("text, value", [("2%", 0.02), ("0.5", 0.5), ("100%", 1.0), ("1", 1.0)])
def test_a_fraction_or_a_percentage(text, value):
    assert parse_duty(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["0", "0%", "-1%", "150%", "1.5", "abc", "", "%", "nan"])
def test_anything_else_is_one_clear_error(text):
    with pytest.raises(UsageError, match="a fraction of the time"):
        parse_duty(text)


@pytest.mark.parametrize("fraction, period", [(0.01, 2.0), (0.9, 2.0), (0.02, 1.0)])
def test_a_slice_too_short_or_leaving_no_time_between_is_refused(fraction, period):
    with pytest.raises(UsageError, match="make the period longer"):
        DutyCycle.check(fraction, period)


class Attacher:
    """Records the cycle; says tracing is over after `slices` slices."""

    def __init__(self, slices: int) -> None:
        self.steps: list[str] = []
        self.slices = slices
        self.paused_at: list[float] = []

    def pause(self) -> bool:
        self.steps.append("pause")
        self.paused_at.append(time.monotonic())
        return self.steps.count("resume") < self.slices

    def resume(self) -> bool:
        self.steps.append("resume")
        return True


class Tracer:
    def __init__(self, attacher: Attacher, autograd: Autograd | None = None) -> None:
        self.attacher = attacher
        self.autograd = autograd


class Autograd:
    """--py-stacks' autograd probes: their steps go in the attacher's list."""

    def __init__(self, steps: list[str]) -> None:
        self.steps = steps

    def pause(self) -> None:
        self.steps.append("autograd off")

    def resume(self) -> None:
        self.steps.append("autograd on")


def test_off_at_the_start_then_a_slice_a_period_each_counted_and_weighed():
    metrics = CallMetrics(alive=lambda pid: True)
    cycle = DutyCycle(0.05, 1.0, metrics, rng=random.Random(1))
    assert metrics.weight == pytest.approx(20)
    attacher = Attacher(slices=3)
    cycle.start(Tracer(attacher))
    cycle._thread.join(timeout=30)
    assert attacher.steps == ["pause"] + ["resume", "pause"] * 3
    begun = metrics.spans.begins[0]  # calls the first slice traced
    metrics.add([call("cudaLaunchKernel", t=begun), call("cudaMemset", t=begun + 1, ret=35)])
    snap = metrics.snapshot(now_ns=1)
    assert snap.sampled_windows == 3 and snap.sampling_ratio == pytest.approx(0.05)
    assert sum(snap.calls.values()) == pytest.approx(40)
    assert sum(snap.errors.values()) == pytest.approx(20)
    hist = snap.latency[("cudaLaunchKernel", "runtime")]
    assert hist.count == pytest.approx(20) and sum(hist.counts) == pytest.approx(20)


def test_with_py_stacks_the_autograd_probes_and_the_line_join_follow_the_slices():
    clock = iter(range(1, 100))
    metrics = CallMetrics(alive=lambda pid: True, clock=lambda: next(clock))
    join = metrics.python_lines()
    cycle = DutyCycle(0.05, 1.0, metrics, rng=random.Random(1))
    attacher = Attacher(slices=2)
    cycle.start(Tracer(attacher, Autograd(attacher.steps)))
    cycle._thread.join(timeout=30)
    assert attacher.steps == ["pause", "autograd off"] + [
        "autograd on", "resume", "pause", "autograd off"] * 2
    assert list(join._spans) == [(1, 2), (3, 4)]  # the slices, each from once its links are in


def test_a_sampled_call_counts_only_if_it_began_within_a_slice_s_length_from_its_start():
    """The probes go in and come out function by function: a call traced while
    they go in (before the slice is told) or come out (after it is over, or
    past its length where its end was told late) would count at 1/fraction
    too. Only those whose entry lies in [start, start + the slice's length)
    count, whenever they are read; the allocations' functions, traced all the
    time, count whenever they were made."""
    now = [0]
    metrics = CallMetrics(alive=lambda pid: True, clock=lambda: now[0])
    DutyCycle(0.05, 1.0, metrics)  # slices of 50 ms, each call seen: 20
    ms = 1_000_000
    now[0] = 1000 * ms
    metrics.window_traced()
    metrics.add([call("cudaLaunchKernel", t=999 * ms),  # as the probes went in
                 call("cudaLaunchKernel", t=1000 * ms),
                 call("cudaLaunchKernel", t=1049 * ms),
                 call("cudaLaunchKernel", t=1050 * ms)])  # past the slice's length
    now[0] = 1200 * ms  # its end told late: the slice is still 50 ms
    metrics.window_ended()
    now[0] = 2000 * ms
    metrics.window_traced()
    metrics.add([call("cudaLaunchKernel", t=1100 * ms),  # between two slices
                 call("cudaLaunchKernel", t=1020 * ms),  # read late: the first slice's
                 call("cudaLaunchKernel", t=2010 * ms),  # the open slice's
                 call("cudaMalloc", t=1500 * ms),  # traced all the time
                 call("cudaLaunchKernel", t=2060 * ms)])
    now[0] = 2030 * ms  # this one's end told early: it ends there
    metrics.window_ended()
    metrics.add([call("cudaLaunchKernel", t=2029 * ms), call("cudaLaunchKernel", t=2031 * ms)])
    calls = {k[0]: v for k, v in metrics.snapshot(now_ns=3000 * ms).calls.items()}
    assert calls == {"cudaLaunchKernel": pytest.approx(5 * 20), "cudaMalloc": 1}


def test_allocations_and_frees_are_counted_exactly_and_their_memory_kept():
    """Their links stay on between slices (EXACT): each call counts once, and
    live memory follows them, where a sampled free would be missed."""
    metrics = CallMetrics(alive=lambda pid: True, clock=lambda: 0)
    DutyCycle(0.05, 1.0, metrics)
    metrics.window_traced()  # a slice from 0 (the launch in it)
    metrics.add([call("cudaMalloc", t=0, size=4096, devPtr="0x1000"),
                 call("cudaMalloc", t=10, size=8192, devPtr="0x2000"),
                 call("cudaFree", t=20, devPtr="0x1000"),
                 call("cudaMalloc", t=30, ret=2, size=1 << 40, devPtr="0x0"),
                 call("cudaLaunchKernel", t=40)])
    snap = metrics.snapshot(now_ns=10**10)
    calls = {k[0]: v for k, v in snap.calls.items()}
    assert calls == {"cudaMalloc": 3, "cudaFree": 1, "cudaLaunchKernel": pytest.approx(20)}
    assert {k[:2]: v for k, v in snap.errors.items()} == {
        ("cudaMalloc", "cudaErrorInsufficientDriver"): 1}
    assert snap.latency[("cudaMalloc", "runtime")].count == 3
    assert {k[-1]: v for k, v in snap.live_bytes.items() if v} == {"device": 8192}


def test_stop_ends_the_cycle_between_slices():
    cycle = DutyCycle(0.05, 1000.0, CallMetrics(alive=lambda pid: True),
                      rng=random.Random(2))
    attacher = Attacher(slices=10)
    cycle.start(Tracer(attacher))
    cycle.stop()
    assert attacher.steps[0] == "pause" and not cycle._thread.is_alive()


class Refusing(Attacher):
    def resume(self) -> bool:
        raise OSError(9, "Bad file descriptor")


def test_links_refused_are_said_in_one_line_not_a_traceback():
    said: list[str] = []
    cycle = DutyCycle(0.05, 1.0, CallMetrics(alive=lambda pid: True), rng=random.Random(3))
    cycle.notify = said.append
    attacher = Refusing(slices=1)
    cycle.start(Tracer(attacher))
    cycle._thread.join(timeout=30)
    assert said == ["--duty: the slices stopped ([Errno 9] Bad file descriptor); the probes "
                    "are off and from now on nothing is counted"]


class Unpausable(Attacher):
    def pause(self) -> bool:
        self.steps.append("pause")
        return False


def test_probes_that_cannot_come_off_count_every_call_unscaled_and_say_so():
    said: list[str] = []
    metrics = CallMetrics(alive=lambda pid: True)
    cycle = DutyCycle(0.05, 1.0, metrics)
    cycle.notify = said.append
    cycle.start(Tracer(Unpausable(slices=1)))
    assert cycle._thread is None and metrics.weight == 1
    metrics.add([call("cudaFree")])
    assert sum(metrics.snapshot(now_ns=1).calls.values()) == 1
    assert len(said) == 1 and "unscaled" in said[0]


def test_otlp_says_the_counts_are_estimates():
    metrics = CallMetrics(alive=lambda pid: True)
    DutyCycle(0.05, 1.0, metrics)  # its weight: 20
    metrics.window_traced()
    metrics.add([call("cudaLaunchKernel", t=metrics.spans.begins[0])])
    data = metrics_data(metrics.snapshot(now_ns=1), Resource({}), 1, 2)
    (scope,) = data.resource_metrics[0].scope_metrics
    by_name = {m.name: m for m in scope.metrics}
    assert by_name["cudaprobe.sampling.ratio"].data.data_points[0].value == pytest.approx(0.05)
    assert by_name["cuda.api.calls"].data.data_points[0].value == pytest.approx(20)


class Injector:
    def __init__(self, call_ties: bool) -> None:
        self.call_ties = call_ties
        self.work_only = not call_ties


class Gpu:
    """The GPU-time library's switches: their steps go in the attacher's list."""

    def __init__(self, steps: list[str], call_ties: bool) -> None:
        self.steps = steps
        self.injector = Injector(call_ties)
        self.reader = object()  # the library was built
        self.off_at: list[float] = []

    def pause(self) -> None:
        self.steps.append("cupti off")
        self.off_at.append(time.monotonic())

    def resume(self, wait: bool = False) -> None:
        self.steps.append("cupti on, acknowledged" if wait else "cupti on")


@pytest.mark.parametrize("ties", [True, False], ids=["call ties", "work alone"])
def test_cupti_switches_around_the_probes_so_that_it_counts_what_they_do(ties):
    """With call ties (--py-stacks) CUPTI is on, each process's watcher having
    said so, before the probes go in and off after they come out: every launch
    they trace has its kernels recorded (and a kernel counts only once its tie
    lies in a slice, from the very start), TIES_TAIL_S after them, for the
    kernels the slice launched that the GPU has not run yet. With the work
    alone, CUPTI's window is the slice's: on after the probes are in, off
    before they come out."""
    clock = iter(range(1, 100))
    metrics = CallMetrics(alive=lambda pid: True, clock=lambda: next(clock))
    join = metrics.python_lines() if ties else None
    cycle = DutyCycle(0.05, 1.0, metrics, rng=random.Random(1))
    attacher = Attacher(slices=2)
    gpu = Gpu(attacher.steps, ties)
    cycle.gpu_of = lambda: gpu
    cycle.start(Tracer(attacher))
    cycle._thread.join(timeout=30)
    if ties:
        assert attacher.steps == ["pause", "cupti off"] + [
            "cupti on, acknowledged", "resume", "pause", "cupti off"] * 2
        assert join.sampled and list(join._spans) == [(1, 2), (3, 4)]
        # (the first "cupti off" is the start's, before any slice)
        tails = [off - out for off, out in zip(gpu.off_at[1:], attacher.paused_at[1:])]
        assert len(tails) == 2 and min(tails) >= TIES_TAIL_S, tails
    else:
        assert attacher.steps == ["pause", "cupti off"] + [
            "resume", "cupti on", "cupti off", "pause"] * 2
    assert metrics.gpu_weight == pytest.approx(20)


class FailingGpu(Gpu):
    """CUPTI's recording that cannot be put on again in the second slice (the
    process's memory gone, a control block not what it was)."""

    def resume(self, wait: bool = False) -> None:
        super().resume(wait)
        if self.steps.count("cupti on") == 2:
            raise ValueError("a control block not as written")


def test_a_failure_within_a_slice_ends_it_and_leaves_everything_off_in_one_line():
    """Whatever fails within a slice (here CUPTI's recording, once the probes
    are in), the slice is ended and the probes and CUPTI come off: left on, an
    open slice would count every later call and kernel at 1/fraction. One line
    says it, not a traceback."""
    clock = iter(range(1, 100))
    metrics = CallMetrics(alive=lambda pid: True, clock=lambda: next(clock))
    join = metrics.python_lines()
    cycle = DutyCycle(0.05, 1.0, metrics, rng=random.Random(1))
    said: list[str] = []
    cycle.notify = said.append
    attacher = Attacher(slices=5)
    cycle.gpu_of = lambda: FailingGpu(attacher.steps, False)
    cycle.start(Tracer(attacher))
    cycle._thread.join(timeout=30)
    assert attacher.steps == ["pause", "cupti off", "resume", "cupti on", "cupti off", "pause",
                              "resume", "cupti on", "pause", "cupti off"]
    assert list(join._spans) == [(1, 2), (3, 4)]  # the second slice ended at the failure
    assert said == ["--duty: the slices stopped (ValueError: a control block not as "
                    "written); the probes are off and from now on nothing is counted"]


@pytest.mark.parametrize("calls_late", [0, 5])
def test_a_slice_s_records_that_come_during_the_next_are_counted_in_their_own(calls_late):
    """CUPTI's records come in batches, seconds late, and a busy node's decoder
    gives the calls seconds late too (`calls_late` slices): each kernel counts
    in the slice its GPU start lies in, each call in that of its entry,
    whenever they are read. Equal slices read unevenly have no spread."""
    now = [0]
    metrics = CallMetrics(alive=lambda pid: True, clock=lambda: now[0])
    metrics.weight = metrics.gpu_weight = 10
    starts = [k * S for k in range(1, 9)]  # a slice a second, each 0.1 s
    late: list[GpuWork] = []
    calls: list[list] = []
    for k, t in enumerate(starts):
        now[0] = t
        metrics.window_traced()
        calls.append([call("cudaLaunchKernel", t - S // 100)]  # as the probes went in
                     + [call("cudaLaunchKernel", t + i * 1_000_000) for i in range(1, 5)])
        if len(calls) > calls_late:
            metrics.add(calls.pop(0))
        late += [GpuWork(7, "kernel", t + i * 1_000_000, t + i * 1_000_000 + 2_000, 0, 1, 7, i,
                         "k") for i in range(5)]
        if k % 3 == 2:  # read now and then: three slices' kernels in one go
            metrics.add_gpu(late)
            late = []
        now[0] = t + S // 10
        metrics.window_ended()
    for batch in calls:
        metrics.add(batch)
    metrics.add_gpu(late)
    now[0] = starts[-1] + 10 * S
    metrics.window_traced()  # the eight closed
    assert metrics.snapshot(now_ns=1).sampling_relative_error == {"calls": 0.0,
                                                                  "gpu_time": 0.0}


def test_the_scaled_totals_relative_error_comes_from_the_spread_of_the_slices():
    """Each slice's calls (of the sampled functions) and GPU time, unscaled, by
    their time: once two slices are closed (their records in), the relative
    standard error of the scaled total is their spread over their mean over
    the square root of their number; exact calls add nothing; exported as
    `cudaprobe_sampling_relative_error` by quantity."""
    now = [0]
    metrics = CallMetrics(alive=lambda pid: True, clock=lambda: now[0])
    metrics.weight = metrics.gpu_weight = 10
    metrics.exact(frozenset({"cudaMalloc"}))
    per_slice, gpu_ns = [10, 12, 8, 10], [3_000, 1_000, 2_000, 2_000]
    period = 5 * S  # past SETTLE_NS: a slice closes as the next begins
    assert metrics.snapshot(now_ns=1).sampling_relative_error == {}
    for k, (n, ns) in enumerate(zip(per_slice, gpu_ns)):
        now[0] = t = (k + 1) * period
        metrics.window_traced()
        metrics.add([call("cudaLaunchKernel", t + 1_000 * i) for i in range(n)]
                    + [call("cudaMalloc", t)] * 3)
        metrics.add_gpu([GpuWork(7, "kernel", t + 5_000, t + 5_000 + ns, 0, 1, 7, 1, "k")])
        now[0] = t + S // 10
        metrics.window_ended()
        if k == 1:  # one slice closed: no spread yet
            assert metrics.snapshot(now_ns=1).sampling_relative_error == {}
    now[0] = 5 * period
    metrics.window_traced()
    metrics.add([call("cudaLaunchKernel", now[0])] * 50)  # past the fourth: its records are in
    metrics.add_gpu([GpuWork(7, "kernel", now[0], now[0] + 9_000, 0, 1, 7, 2, "k")])
    now[0] = 6 * period
    metrics.window_traced()  # the fourth closed; the fifth may still get calls: open
    error = metrics.snapshot(now_ns=1).sampling_relative_error
    assert error["calls"] == pytest.approx(statistics.stdev(per_slice) / 10 / 2)
    assert error["gpu_time"] == pytest.approx(statistics.stdev(gpu_ns) / 2_000 / 2)
    registry = CollectorRegistry()
    registry.register(CallCollector(metrics))
    text = generate_latest(registry).decode()
    assert re.search(r'^cudaprobe_sampling_relative_error\{quantity="calls"\} 0\.0816', text,
                     re.M), text
    data = metrics_data(metrics.snapshot(now_ns=1), Resource({}), 1, 2)
    (scope,) = data.resource_metrics[0].scope_metrics
    points = {p.attributes["quantity"]: p.value for m in scope.metrics
              if m.name == "cudaprobe.sampling.relative_error" for p in m.data.data_points}
    assert points == pytest.approx(error)
