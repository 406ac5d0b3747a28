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
from cudaprobe.sessions.duty import DutyCycle, parse_duty

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


class Gpu:
    """The GPU-time library in the node's processes: any switch of its
    recording goes in the attacher's list (none may come)."""

    def __init__(self, steps: list[str]) -> None:
        self.steps = steps
        self.reader = object()  # the library was built

    def pause(self) -> None:
        self.steps.append("cupti off")

    def resume(self, wait: bool = False) -> None:
        self.steps.append("cupti on")


def test_cupti_records_all_along_never_switched_with_the_slices():
    """--duty --gpu-time: CUPTI's recording is never switched with the slices
    (switched while a job launches, it can kill the job), so a kernel counts
    by name, unscaled, whenever it ran, in a slice or not; by line only where
    the probes traced its launch, in a slice. Said once."""
    clock = iter(range(1, 100))
    metrics = CallMetrics(alive=lambda pid: True, clock=lambda: next(clock))
    join = metrics.python_lines()
    cycle = DutyCycle(0.05, 1.0, metrics, rng=random.Random(1))
    said: list[str] = []
    cycle.notify = said.append
    attacher = Attacher(slices=2)
    cycle.gpu_of = lambda: Gpu(attacher.steps)
    cycle.start(Tracer(attacher))
    cycle._thread.join(timeout=30)
    assert attacher.steps == ["pause"] + ["resume", "pause"] * 2
    assert list(join._spans) == [(1, 2), (3, 4)]
    assert len(said) == 1 and "all along" in said[0] and "unscaled" in said[0], said
    metrics.add_gpu([GpuWork(7, "kernel", 10 * S, 10 * S + 3_000, 0, 1, 7, 1, "k")])
    (hist,) = metrics.snapshot(now_ns=1).gpu_time.values()
    assert (hist.count, hist.sum_ns) == (1, 3_000)


class FailingAttacher(Attacher):
    """Probes that cannot be taken out at the end of the second slice (a
    process's memory gone, links refused)."""

    def pause(self) -> bool:
        if self.steps.count("resume") == 2 and "pause failed" not in self.steps:
            self.steps.append("pause failed")
            raise ValueError("a link not as written")
        return super().pause()


def test_a_failure_within_a_slice_ends_it_and_leaves_everything_off_in_one_line():
    """Whatever fails within a slice (here the probes coming out), the slice is
    ended and the probes and the autograd probes are taken out once more:
    left in, an open slice would count every later call at 1/fraction. One
    line says it, not a traceback."""
    clock = iter(range(1, 100))
    metrics = CallMetrics(alive=lambda pid: True, clock=lambda: next(clock))
    join = metrics.python_lines()
    cycle = DutyCycle(0.05, 1.0, metrics, rng=random.Random(1))
    said: list[str] = []
    cycle.notify = said.append
    attacher = FailingAttacher(slices=5)
    cycle.start(Tracer(attacher, Autograd(attacher.steps)))
    cycle._thread.join(timeout=30)
    assert attacher.steps == ["pause", "autograd off", "autograd on", "resume", "pause",
                              "autograd off", "autograd on", "resume", "pause failed", "pause",
                              "autograd off"]
    assert list(join._spans) == [(1, 2), (3, 4)]  # the second slice ended before the failure
    assert said == ["--duty: the slices stopped (ValueError: a link not as written); the "
                    "probes are off and from now on nothing is counted"]


@pytest.mark.parametrize("calls_late", [0, 5])
def test_a_slice_s_calls_that_come_during_the_next_are_counted_in_their_own(calls_late):
    """A busy node's decoder gives the calls seconds late (`calls_late`
    slices): each call counts in the slice of its entry, whenever it is read.
    Equal slices read unevenly have no spread."""
    now = [0]
    metrics = CallMetrics(alive=lambda pid: True, clock=lambda: now[0])
    metrics.weight = 10
    starts = [k * S for k in range(1, 9)]  # a slice a second, each 0.1 s
    calls: list[list] = []
    for t in starts:
        now[0] = t
        metrics.window_traced()
        calls.append([call("cudaLaunchKernel", t - S // 100)]  # as the probes went in
                     + [call("cudaLaunchKernel", t + i * 1_000_000) for i in range(1, 5)])
        if len(calls) > calls_late:
            metrics.add(calls.pop(0))
        now[0] = t + S // 10
        metrics.window_ended()
    for batch in calls:
        metrics.add(batch)
    now[0] = starts[-1] + 10 * S
    metrics.window_traced()  # the eight closed
    assert metrics.snapshot(now_ns=1).sampling_relative_error == {"calls": 0.0}


def test_the_scaled_totals_relative_error_comes_from_the_spread_of_the_slices():
    """Each slice's calls (of the sampled functions), unscaled, by their time:
    once two slices are closed (their records in), the relative
    standard error of the scaled total is their spread over their mean over
    the square root of their number; exact calls add nothing; exported as
    `cudaprobe_sampling_relative_error` by quantity."""
    now = [0]
    metrics = CallMetrics(alive=lambda pid: True, clock=lambda: now[0])
    metrics.weight = 10
    metrics.exact(frozenset({"cudaMalloc"}))
    per_slice = [10, 12, 8, 10]
    period = 5 * S  # past SETTLE_NS: a slice closes as the next begins
    assert metrics.snapshot(now_ns=1).sampling_relative_error == {}
    for k, n in enumerate(per_slice):
        now[0] = t = (k + 1) * period
        metrics.window_traced()
        metrics.add([call("cudaLaunchKernel", t + 1_000 * i) for i in range(n)]
                    + [call("cudaMalloc", t)] * 3)
        now[0] = t + S // 10
        metrics.window_ended()
        if k == 1:  # one slice closed: no spread yet
            assert metrics.snapshot(now_ns=1).sampling_relative_error == {}
    now[0] = 5 * period
    metrics.window_traced()
    metrics.add([call("cudaLaunchKernel", now[0])] * 50)  # past the fourth: its records are in
    now[0] = 6 * period
    metrics.window_traced()  # the fourth closed; the fifth may still get calls: open
    error = metrics.snapshot(now_ns=1).sampling_relative_error
    assert error["calls"] == pytest.approx(statistics.stdev(per_slice) / 10 / 2)
    assert set(error) == {"calls"}  # GPU time: CUPTI records all along, exact
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
