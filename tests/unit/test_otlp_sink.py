"""The --otlp sink in-process, against the OTLP/HTTP receiver of the tests:
spans, nesting, status and times as received; drops counted, never silent;
the CLI's errors for missing packages and stray options."""

from __future__ import annotations

import dataclasses
import io
import socket
import subprocess
import sys
import time

import pytest
from opentelemetry.sdk.resources import Resource

from cudaprobe.analysis.metrics import CallMetrics
from cudaprobe.analysis.summary import Summary
from cudaprobe.commands import otlp_options
from cudaprobe.decode.calls import Call
from cudaprobe.errors import CudaprobeError
from cudaprobe.output import otlp, otlp_sinks
from cudaprobe.output.fanout import Fanout
from cudaprobe.output.jsonl import JsonlReporter
from cudaprobe.output.metrics_sink import MetricsSink
from cudaprobe.output.otlp_metrics import MetricsPusher
from cudaprobe.output.otlp_model import OtlpConfig, Selection, otlp_endpoints

from ..conftest import HANG_S, cudaprobe_cmd
from ..otlp_receiver import PATIENT_S, OtlpReceiver, attributes


def call(event: str, ts: int, dur: int | None, ret: int | None = 0, api: str = "runtime",
         ret_name: str | None = "cudaSuccess", **args) -> Call:
    return Call(time_ms=0.0, ts_ns=ts, pid=7, tid=8, process="train", event=event, api=api,
                category="memory", duration_ns=dur, ret=ret, ret_name=ret_name, args=args,
                details="")


def run_sink(url: str, calls: list[Call], notes: list[str], **config) -> Summary:
    metrics = CallMetrics(alive=lambda pid: True)
    config = {"timeout_s": PATIENT_S, **config}
    sink = otlp.OtlpSink(OtlpConfig(otlp_endpoints(url), **config), notes.append, metrics)
    out = io.StringIO()
    fan = Fanout(JsonlReporter(out), [MetricsSink(metrics), sink])
    fan.start()
    fan.calls([c for c in calls if not c.in_flight])
    fan.calls([c for c in calls if c.in_flight])
    summary = Summary()
    summary.add(calls)
    summary.lost = {"ringbuf_full": 0}
    fan.finish(summary)
    assert out.getvalue().count("\n") == len(calls) + 1  # the primary reporter got it all
    return summary


def test_spans_nested_timed_and_failed_as_the_calls_were():
    t0 = time.monotonic_ns()
    # in call order, as the trace session gives them: cudaMalloc, then the driver
    # call it made (depth 1, its parent's ts_ns)
    calls = [call("cudaMalloc", t0 + 1_000, 3_000, ret=2, ret_name="cudaErrorMemoryAllocation",
                  devPtr="0x0", size=1 << 30),
             call("cuMemAlloc_v2", t0 + 2_000, 500, ret=2, api="driver",
                  ret_name="CUDA_ERROR_OUT_OF_MEMORY", bytesize=1 << 30),
             call("cudaFree", t0 + 9_000, 400, devPtr="0x10"),
             call("cudaDeviceSynchronize", t0 + 20_000, None, ret=None, ret_name=None)]
    calls[1].depth, calls[1].parent = 1, calls[0].ts_ns
    notes: list[str] = []
    with OtlpReceiver() as r:
        epoch_before = time.time_ns()
        summary = run_sink(r.url, calls, notes)
        spans = {s.name: (res, s) for res, s in r.spans()}
        metrics = r.metrics()
    assert set(spans) == {"cuMemAlloc_v2", "cudaMalloc", "cudaFree", "cudaDeviceSynchronize"}
    resource = spans["cudaMalloc"][0]
    assert resource["service.name"] == "cudaprobe" and resource["host.name"]
    child, parent = spans["cuMemAlloc_v2"][1], spans["cudaMalloc"][1]
    assert child.parent_span_id == parent.span_id and child.trace_id == parent.trace_id
    assert not parent.parent_span_id and spans["cudaFree"][1].trace_id != parent.trace_id
    assert parent.status.code == parent.status.STATUS_CODE_ERROR
    assert parent.status.message == "cudaErrorMemoryAllocation"
    assert spans["cudaFree"][1].status.code == parent.status.STATUS_CODE_UNSET
    assert parent.kind == parent.SPAN_KIND_INTERNAL
    # the calls' own times, monotonic -> epoch with one offset
    assert parent.end_time_unix_nano - parent.start_time_unix_nano == 3_000
    assert child.start_time_unix_nano - parent.start_time_unix_nano == 1_000
    assert abs(parent.start_time_unix_nano - epoch_before) < 5_000_000_000
    a = attributes(child.attributes)
    assert a["cuda.api"] == "driver" and a["cuda.memory.bytes"] == 1 << 30
    assert a["cuda.result.name"] == "CUDA_ERROR_OUT_OF_MEMORY"
    in_flight = spans["cudaDeviceSynchronize"][1]
    assert attributes(in_flight.attributes)["cuda.in_flight"] is True
    assert in_flight.end_time_unix_nano > in_flight.start_time_unix_nano
    # metrics: in-flight calls have no result, so they are not counted
    points = {attributes(p.attributes)["cuda.function"]: p.as_int
              for p in metrics["cuda.api.calls"].sum.data_points}
    assert points == {"cuMemAlloc_v2": 1, "cudaMalloc": 1, "cudaFree": 1}
    assert metrics["cuda.api.calls"].sum.is_monotonic
    hist = metrics["cuda.api.duration"].histogram.data_points
    assert sum(p.count for p in hist) == 3 and all(sum(p.bucket_counts) == p.count for p in hist)
    assert summary.total_lost == 0
    assert notes == [f"OTLP: 4 spans sent to {r.url}/v1/traces; metrics sent to "
                     f"{r.url}/v1/metrics (1 export)"]


def test_spans_only_and_metrics_only():
    t0 = time.monotonic_ns()
    calls = [call("cudaFree", t0, 100)]
    with OtlpReceiver() as r:
        notes: list[str] = []
        sink = otlp_sinks.otlp_sink(OtlpConfig(otlp_endpoints(r.url), metrics=False),
                                      notes.append, CallMetrics())
        sink.start()
        sink.calls(calls)
        sink.finish(Summary())
        assert len(r.spans()) == 1 and r.requests["/v1/metrics"] == []
        assert notes == [f"OTLP: 1 span sent to {r.url}/v1/traces"]
        run_sink(r.url, calls, notes, spans=False)
        assert len(r.spans()) == 1 and len(r.requests["/v1/metrics"]) == 1
    p = subprocess.run(cudaprobe_cmd("trace", "--dump-bpf", "--otlp", "c:4318", "--otlp-no-spans",
                                     "--otlp-no-metrics"), capture_output=True, text=True,
                       timeout=HANG_S)
    assert p.returncode == 2 and "leave nothing to send" in p.stderr


def test_slow_selection_leaves_out_fast_calls_and_says_how_many():
    t0 = time.monotonic_ns()
    calls = [call("cudaFree", t0 + i * 1000, 100) for i in range(5)]
    calls.append(call("cudaMalloc", t0 + 9_000, 2_000_000))
    notes: list[str] = []
    with OtlpReceiver() as r:
        run_sink(r.url, calls, notes, selection=Selection(slow_ns=1_000_000))
        assert [s.name for _, s in r.spans()] == ["cudaMalloc"]
    assert "5 calls not chosen by --otlp-slow/--otlp-sample" in notes[-1]


def test_a_collector_that_never_answers_costs_counted_spans_not_a_hang(monkeypatch):
    monkeypatch.setattr(otlp, "QUEUE_SIZE", 3)
    t0 = time.monotonic_ns()
    calls = [call("cudaFree", t0 + i * 1000, 100) for i in range(10)]
    notes: list[str] = []
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        started = time.monotonic()
        summary = run_sink(f"127.0.0.1:{silent.getsockname()[1]}", calls, notes, timeout_s=0.5)
        took = time.monotonic() - started
    # the 3 queued: sent and not taken, or still unsent when the flush gave up (which
    # of the two depends on how far the exporter's thread came: the machine's speed)
    undelivered = dict(summary.undelivered)
    assert undelivered.pop("otlp_queue_full") == 7
    assert set(undelivered) <= {"otlp_unsent", "otlp_export_failed"}
    assert sum(undelivered.values()) == 3
    assert summary.total_lost == 0  # every row was written: spans are not calls lost
    assert any("OTLP queue full" in n for n in notes)
    assert any("failing (no answer in 0.5s)" in n for n in notes)
    assert "10 of 10 spans not delivered" in notes[-1]
    assert took < 10  # a hang check, not a timing goal: the flush gives up at 0.5s


def test_missing_sdk_is_one_line(monkeypatch):
    monkeypatch.delitem(sys.modules, "cudaprobe.output.otlp")
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(CudaprobeError, match=r"--otlp needs opentelemetry-sdk .* pip install "
                                             r"'cudaprobe\[otlp\]'"):
        otlp_options.otlp_config("http://c:4318", None, None, "cudaprobe", otlp_no_spans=False,
                                 otlp_no_metrics=False, otlp_interval=10.0,
                                 otlp_timeout=5.0)


def test_cli_without_the_sdk_and_with_stray_options():
    code = ("import sys; sys.modules['opentelemetry.sdk'] = None; from cudaprobe.cli import main;"
            " main(['trace', '--dump-bpf', '--otlp', 'http://c:4318'])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_S)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.count("\n") == 1 and "pip install 'cudaprobe[otlp]'" in p.stderr
    p = subprocess.run(cudaprobe_cmd("trace", "--dump-bpf", "--otlp-slow", "5ms"),
                       capture_output=True, text=True, timeout=HANG_S)
    assert p.returncode == 2 and "--otlp-slow goes with --otlp ENDPOINT" in p.stderr
    p = subprocess.run(cudaprobe_cmd("trace", "--otlp", "c:4318", "--otlp-slow", "5 min"),
                       capture_output=True, text=True, timeout=HANG_S)
    assert p.returncode == 2 and "not a duration" in p.stderr


def test_fanout_finishes_the_output_even_when_a_sink_fails():
    class Broken(MetricsSink):
        def finish(self, summary: Summary) -> None:
            summary.lost["broken"] = 1
            raise RuntimeError("sink bug")

    out = io.StringIO()
    fan = Fanout(JsonlReporter(out), [Broken(CallMetrics())])
    fan.start()
    fan.calls([call("cudaFree", 1, 1)])
    with pytest.raises(RuntimeError, match="sink bug"):
        fan.finish(Summary(lost={}))
    assert fan.name == "jsonl"
    assert out.getvalue().splitlines()[-1].startswith('{"summary"')
    assert '"broken": 1' in out.getvalue() or '"broken":1' in out.getvalue()


@pytest.mark.parametrize("down", ["metrics", "traces"])
def test_an_endpoint_down_is_said_as_itself(down):
    """Spans' and metrics' endpoints apart: the one that does not answer is the
    one named, and spans that did not arrive are not calls lost."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1/{down}"
    notes: list[str] = []
    t0 = time.monotonic_ns()
    calls = [call("cudaFree", t0 + i * 1000, 100) for i in range(5)]
    with OtlpReceiver() as r:
        endpoints = dataclasses.replace(otlp_endpoints(r.url), **{down: closed})
        metrics = CallMetrics(alive=lambda pid: True)
        sink = otlp.OtlpSink(OtlpConfig(endpoints), notes.append, metrics)
        fan = Fanout(JsonlReporter(io.StringIO()), [MetricsSink(metrics), sink])
        fan.start()
        fan.calls(calls)
        summary = Summary()
        fan.finish(summary)
    up = endpoints.traces if down == "metrics" else endpoints.metrics
    failing = [n for n in notes if "failing" in n]
    assert failing and all(closed in n for n in failing), notes
    assert not any(f"export to {up} failing" in n for n in notes), notes
    assert summary.total_lost == 0
    assert bool(summary.undelivered) == (down == "traces")


def test_a_periodic_push_that_comes_after_shutdown_is_no_failure():
    """The pusher's thread can wake for its periodic export just as shutdown()
    makes the last one and shuts the exporter: its push then finds the pusher
    closed and exports nothing, rather than failing on the shut exporter and
    counting an export not delivered (it failed a loaded CI run)."""
    failed: list = []
    with OtlpReceiver() as r:
        pusher = MetricsPusher(CallMetrics(alive=lambda pid: True),
                               OtlpConfig(otlp_endpoints(r.url), interval_s=HANG_S,
                                          timeout_s=PATIENT_S),
                               Resource({}), 0, lambda **kw: failed.append(kw))
        pusher.shutdown()
        pusher.push()  # the thread's, woken meanwhile
    assert failed == [] and (pusher.tried, pusher.sent) == (1, 1)
    assert pusher.outcome().endswith("(1 export)"), pusher.outcome()
