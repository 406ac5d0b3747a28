"""cudaprobe trace --otlp on the real libcudart and Debian's libcuda, into an
OTLP/HTTP receiver run by the test, which decodes the protobuf payloads.

Without a GPU, libcudart 13 asks libcuda for its version inside the first
cudaGetDeviceCount, finds the 535 driver too old, and fails every call with
cudaErrorInsufficientDriver: one driver call nested in a runtime call, and
runtime calls that all fail, as the spans must show.
"""

from __future__ import annotations

import collections
import socket
import time
from pathlib import Path

from ..conftest import HANG_S, build_workload
from ..otlp_receiver import PATIENT, OtlpReceiver, attributes
from .conftest import expected_calls, trace_jsonl
from .test_trace_driver import driver_calls


def spans_by_name(receiver: OtlpReceiver) -> dict[str, list]:
    out = collections.defaultdict(list)
    for _resource, span in receiver.spans():
        out[span.name].append(span)
    return out


def test_spans_as_the_workload_made_the_calls(tmp_path, libcudart, libcuda):
    exe = build_workload("runtime_calls.c")
    lib_dir = str(libcuda.parent)
    with OtlpReceiver() as r:
        before = time.time_ns()
        calls, summary, proc = trace_jsonl(
            tmp_path, "--otlp", r.url, *PATIENT, "--otlp-interval", "0.2", "--lib", str(libcudart),
            "--lib", str(libcuda), command=["env", f"LD_LIBRARY_PATH={lib_dir}", str(exe), "3"])
        after = time.time_ns()
        spans = spans_by_name(r)
        metrics = r.metrics()
        resources = {tuple(sorted(res.items())) for res, _ in r.spans()}
    assert proc.returncode == 0, proc.stderr
    assert summary["lost_total"] == 0, summary
    truth = expected_calls(proc.stdout)
    made = collections.Counter(t["event"] for t in truth)
    assert len(truth) == 30
    # one span per call, the workload's and the driver call libcudart made
    assert {name: len(s) for name, s in spans.items()} == {
        **made, "cuDriverGetVersion": 1}
    assert collections.Counter(c["event"] for c in calls) == {**made, "cuDriverGetVersion": 1}
    assert f"OTLP: 31 spans sent to {r.url}/v1/traces" in proc.stderr
    assert r.encodings == {"gzip"} and r.bad == []
    (resource,) = resources
    assert dict(resource)["service.name"] == "cudaprobe"

    # the driver call is the child of the cudaGetDeviceCount it was made in
    version = spans["cuDriverGetVersion"][0]
    first_count = min(spans["cudaGetDeviceCount"], key=lambda s: s.start_time_unix_nano)
    assert version.parent_span_id == first_count.span_id
    assert version.trace_id == first_count.trace_id
    assert first_count.start_time_unix_nano <= version.start_time_unix_nano
    assert version.end_time_unix_nano <= first_count.end_time_unix_nano
    assert version.status.code == version.status.STATUS_CODE_UNSET
    assert all(not s.parent_span_id for name, ss in spans.items() if name != "cuDriverGetVersion"
               for s in ss)

    jsonl = {(c["event"], c["ts_ns"]): c for c in calls}
    ordered = sorted((s for ss in spans.values() for s in ss if s.name != "cuDriverGetVersion"),
                     key=lambda s: s.start_time_unix_nano)
    assert [s.name for s in ordered] == [t["event"] for t in truth]
    for span in ordered:
        a = attributes(span.attributes)
        assert before < span.start_time_unix_nano < span.end_time_unix_nano < after
        assert span.status.code == span.status.STATUS_CODE_ERROR
        assert span.status.message == a["cuda.result.name"] == "cudaErrorInsufficientDriver"
        assert a["cuda.result.code"] == 35 and a["cuda.api"] == "runtime"
        assert a["process.executable.name"] == "runtime_calls"
        # as in the JSONL: the same pid, tid and duration
        same = [c for c in calls if c["event"] == span.name and c["tid"] == a["thread.id"]
                and c["pid"] == a["process.pid"]
                and c["duration_ns"] == span.end_time_unix_nano - span.start_time_unix_nano]
        assert same, (span.name, a)
    assert len(jsonl) == len(calls)

    first = {s.name: attributes(s.attributes) for s in reversed(ordered)}
    assert first["cudaMalloc"]["cuda.memory.bytes"] == 1 << 20
    assert first["cudaMalloc"]["cuda.arg.size"] == 1 << 20
    assert first["cudaMemcpy"]["cuda.memcpy.kind"] == "HostToDevice"
    assert first["cudaMemcpy"]["cuda.memcpy.bytes"] == 4096
    assert first["cudaMemcpy"]["cuda.arg.dst"] == "0x1000"
    assert first["cudaMemcpyAsync"]["cuda.memcpy.kind"] == "DeviceToHost"
    assert first["cudaMemcpyAsync"]["cuda.memcpy.bytes"] == 123
    assert first["cudaMemcpyAsync"]["cuda.arg.stream"] == "0x5000"
    launch = first["cudaLaunchKernel"]
    assert launch["cuda.arg.grid_dim"] == [4, 2, 1] and launch["cuda.arg.block_dim"] == [256, 1, 1]
    assert launch["cuda.arg.shared_mem"] == 1024 and launch["cuda.category"] == "kernel"

    # the metrics' last (cumulative) export counts every completed call
    counted = collections.Counter()
    for p in metrics["cuda.api.calls"].sum.data_points:
        counted[attributes(p.attributes)["cuda.function"]] += p.as_int
    assert counted == {**made, "cuDriverGetVersion": 1}
    errors = {attributes(p.attributes)["cuda.function"]: p.as_int
              for p in metrics["cuda.api.errors"].sum.data_points}
    assert errors == made


def test_driver_calls_without_a_runtime_call_are_roots(tmp_path, libcuda):
    exe = driver_calls(libcuda)
    with OtlpReceiver() as r:
        calls, summary, proc = trace_jsonl(tmp_path, "--otlp", r.url, *PATIENT, "--lib",
                                           str(libcuda), command=[str(exe)])
        spans = spans_by_name(r)
    assert proc.returncode == 0, proc.stderr
    assert summary["lost_total"] == 0
    assert {n: len(s) for n, s in spans.items()} == collections.Counter(c["event"] for c in calls)
    assert not any(s.parent_span_id for ss in spans.values() for s in ss)
    init = attributes(spans["cuInit"][0].attributes)
    assert init["cuda.api"] == "driver" and init["cuda.result.name"] == "CUDA_ERROR_NO_DEVICE"
    copy = attributes(spans["cuMemcpyDtoHAsync_v2"][0].attributes)
    assert copy["cuda.memcpy.kind"] == "DeviceToHost" and copy["cuda.memcpy.bytes"] == 123


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_collector_warns_counts_and_does_not_hang(tmp_path, libcudart):
    exe = build_workload("runtime_calls.c")
    url = f"http://127.0.0.1:{closed_port()}"
    calls, summary, proc = trace_jsonl(tmp_path, "--otlp", url, "--lib", str(libcudart),
                                       command=[str(exe), "3"], timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    assert len(calls) == summary["calls"] == 30  # the trace itself is whole
    assert f"OTLP export to {url}/v1/traces failing (" in proc.stderr
    assert "Connection refused" in proc.stderr
    assert summary["lost_total"] == 0 and not any(k.startswith("otlp_") for k in summary["lost"])
    assert sum(summary["undelivered"].values()) == 30, summary  # spans, said apart
    assert f"30 of 30 spans not delivered to {url}/v1/traces" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_jsonl_keys_are_unchanged_by_otlp(tmp_path: Path, libcudart):
    """--otlp adds a sink; the output file is what it was without it."""
    exe = build_workload("runtime_calls.c")
    with OtlpReceiver() as r:
        calls, summary, proc = trace_jsonl(tmp_path, "--otlp", r.url, *PATIENT, "--otlp-no-spans",
                                           "--lib", str(libcudart), command=[str(exe), "1"])
        assert r.spans() == [] and r.requests["/v1/metrics"]
    assert proc.returncode == 0, proc.stderr
    assert len(calls) == 10 and summary["lost_total"] == 0
    assert not any(k.startswith("otlp_") for k in summary["lost"])
