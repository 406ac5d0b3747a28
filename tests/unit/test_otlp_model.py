"""--otlp without the SDK: endpoints, durations, span attributes, which calls
become spans, and which runtime call made which driver calls."""

from __future__ import annotations

import random

import pytest

from cudaprobe.decode.calls import Call
from cudaprobe.decode.nesting import CallTree, call_trees
from cudaprobe.errors import UsageError
from cudaprobe.output.otlp_model import (
    Selection,
    otlp_endpoints,
    parse_duration,
    snake_case,
    span_attributes,
)


def call(event: str, ts: int = 1_000, dur: int | None = 500, ret: int | None = 0,
         api: str = "runtime", category: str = "memory", tid: int = 8,
         ret_name: str | None = None, **args) -> Call:
    if ret_name is None and ret is not None:
        ret_name = "cudaSuccess" if ret == 0 else "cudaErrorInsufficientDriver"
    return Call(time_ms=ts / 1e6, ts_ns=ts, pid=7, tid=tid, process="train", event=event,
                api=api, category=category, duration_ns=dur, ret=ret, ret_name=ret_name,
                args=args, details="")


@pytest.mark.parametrize("given,traces,metrics", [
    ("http://collector:4318", "http://collector:4318/v1/traces",
     "http://collector:4318/v1/metrics"),
    ("collector:4318/", "http://collector:4318/v1/traces", "http://collector:4318/v1/metrics"),
    ("https://otel.example/v1/traces", "https://otel.example/v1/traces",
     "https://otel.example/v1/metrics"),
    ("http://gw:80/otlp/v1/metrics", "http://gw:80/otlp/v1/traces", "http://gw:80/otlp/v1/metrics"),
    ("http://gw/otlp", "http://gw/otlp/v1/traces", "http://gw/otlp/v1/metrics"),
    ("http://[::1]:4318", "http://[::1]:4318/v1/traces", "http://[::1]:4318/v1/metrics"),
])
def test_endpoints_follow_the_otlp_http_convention(given, traces, metrics):
    e = otlp_endpoints(given)
    assert (e.traces, e.metrics) == (traces, metrics)


@pytest.mark.parametrize("bad", ["grpc://collector:4317", "http://", "http://c:43x8", "",
                                 "http://[::1", "notaurl"])
def test_bad_endpoints_are_usage_errors(bad):
    with pytest.raises(UsageError, match="--otlp"):
        otlp_endpoints(bad)


def test_durations():
    assert [parse_duration(t) for t in ("250ns", "100us", "100µs", "5ms", "1.5s", " 2 ms")] == [
        250, 100_000, 100_000, 5_000_000, 1_500_000_000, 2_000_000]
    for bad in ("5", "5 min", "-1ms", "ms"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_duration(bad)


def test_snake_case_of_cuda_argument_names():
    assert [snake_case(n) for n in ("devPtr", "ByteCount", "gridDim", "hStream", "N", "uc",
                                    "WidthInBytes", "pPitch")] == [
        "dev_ptr", "byte_count", "grid_dim", "h_stream", "n", "uc", "width_in_bytes", "p_pitch"]


def test_attributes_of_a_failed_runtime_copy():
    c = call("cudaMemcpyAsync_ptsz", ret=35, category="transfer", dst="0x1000", src="0x2000",
             count=4096, kind="HostToDevice", stream="0x5000")
    assert span_attributes(c) == {
        "cuda.api": "runtime", "cuda.function": "cudaMemcpyAsync_ptsz",
        "cuda.category": "transfer", "code.function.name": "cudaMemcpyAsync_ptsz",
        "process.pid": 7, "process.executable.name": "train", "thread.id": 8,
        "cuda.result.code": 35, "cuda.result.name": "cudaErrorInsufficientDriver",
        "error.type": "cudaErrorInsufficientDriver",
        "cuda.memcpy.kind": "HostToDevice", "cuda.memcpy.bytes": 4096,
        "cuda.arg.dst": "0x1000", "cuda.arg.src": "0x2000", "cuda.arg.count": 4096,
        "cuda.arg.kind": "HostToDevice", "cuda.arg.stream": "0x5000"}


@pytest.mark.parametrize("event,args,kind,nbytes", [
    ("cuMemcpyHtoD_v2", {"ByteCount": 64}, "HostToDevice", 64),
    ("cuMemcpyDtoHAsync_v2", {"ByteCount": 9}, "DeviceToHost", 9),
    ("cuMemcpyDtoD_v2", {"ByteCount": 1}, "DeviceToDevice", 1),
    ("cuMemcpy", {"ByteCount": 5}, "Default", 5),
])
def test_driver_copies_take_their_direction_from_their_name(event, args, kind, nbytes):
    a = span_attributes(call(event, api="driver", category="transfer", **args))
    assert (a["cuda.memcpy.kind"], a["cuda.memcpy.bytes"]) == (kind, nbytes)


def test_copy_without_kind_argument_and_2d_sizes():
    peer = span_attributes(call("cudaMemcpyPeer", category="transfer", count=10))
    assert peer["cuda.memcpy.kind"] == "DeviceToDevice"
    two_d = span_attributes(call("cudaMemcpy2D", category="transfer", width=100, height=3,
                                 dpitch=128, spitch=128, kind="DeviceToHost"))
    assert two_d["cuda.memcpy.bytes"] == 300


def test_allocation_and_launch_attributes():
    m = span_attributes(call("cuMemAlloc_v2", api="driver", dptr="0x7f00", bytesize=1 << 20,
                             ret_name="CUDA_SUCCESS"))
    assert m["cuda.memory.bytes"] == 1 << 20 and "cuda.memcpy.kind" not in m
    assert "error.type" not in m and m["cuda.result.name"] == "CUDA_SUCCESS"
    k = span_attributes(call("cudaLaunchKernel", category="kernel", func="0x401000",
                             func_name="vecAdd(float*, int)", gridDim=[4, 2, 1],
                             blockDim=[256, 1, 1], sharedMem=0, stream="0x0"))
    assert k["cuda.kernel.name"] == "vecAdd(float*, int)"
    assert k["cuda.arg.grid_dim"] == [4, 2, 1] and k["cuda.arg.block_dim"] == [256, 1, 1]
    assert "cuda.arg.func_name" not in k


def test_out_parameters_not_read_are_left_out():
    """A failed call's out-parameters are None: no attribute, not an empty value."""
    m = span_attributes(call("cudaMalloc", ret=2, ret_name="cudaErrorMemoryAllocation",
                             devPtr=None, size=64))
    assert "cuda.arg.dev_ptr" not in m and m["cuda.arg.size"] == 64
    assert m["cuda.memory.bytes"] == 64 and m["error.type"] == "cudaErrorMemoryAllocation"
    assert None not in m.values()


def test_not_ready_is_no_error_and_in_flight_has_no_result():
    q = span_attributes(call("cudaStreamQuery", ret=600, ret_name="cudaErrorNotReady"))
    assert q["cuda.result.code"] == 600 and "error.type" not in q
    f = span_attributes(call("cudaDeviceSynchronize", dur=None, ret=None, category="sync",
                             out=None))
    assert f["cuda.in_flight"] is True
    assert not any(k.startswith(("cuda.result", "cuda.arg")) for k in f)


def tree(*calls: Call) -> CallTree:
    return CallTree(calls[0], list(calls[1:]))


def test_selection_by_default_takes_every_call():
    assert Selection().wants(tree(call("cudaMalloc", dur=1)))


def test_slow_calls_errors_and_in_flight_calls_always_chosen():
    s = Selection(slow_ns=parse_duration("100us"))
    assert not s.wants(tree(call("cudaMalloc", dur=99_999)))
    assert s.wants(tree(call("cudaMalloc", dur=100_000)))
    assert s.wants(tree(call("cudaMalloc", dur=10, ret=2)))
    assert s.wants(tree(call("cudaDeviceSynchronize", dur=None, ret=None)))
    assert not s.wants(tree(call("cudaStreamQuery", dur=10, ret=600,
                                 ret_name="cudaErrorNotReady")))
    # a runtime call goes with its driver calls: one slow or failed child is enough
    assert s.wants(tree(call("cudaMalloc", dur=10), call("cuMemAlloc_v2", api="driver",
                                                         dur=200_000)))


def test_sample_ratio_draws_that_fraction():
    s = Selection(sample=0.25, rng=random.Random(7))
    chosen = sum(s.wants(tree(call("cudaMalloc"))) for _ in range(20_000))
    assert 4_500 < chosen < 5_500
    assert not any(Selection(sample=0.0).wants(tree(call("cudaMalloc"))) for _ in range(100))
    # --otlp-slow and --otlp-sample: slow ones, and a sample of the rest
    both = Selection(slow_ns=1_000, sample=0.5, rng=random.Random(1))
    fast = sum(both.wants(tree(call("cudaFree", dur=10))) for _ in range(2_000))
    assert 900 < fast < 1_100 and both.wants(tree(call("cudaFree", dur=1_000)))


def nested(child: Call, parent: Call, depth: int = 1) -> Call:
    child.depth, child.parent = depth, parent.ts_ns
    return child


def test_calls_made_inside_a_call_are_its_tree():
    # in call order, with their depth, as decode.nesting.CallOrder gives them
    top = call("cudaGetDeviceCount", ts=1_000, dur=1_000)
    init = call("cuInit", ts=1_100, dur=100, api="driver")
    calls = [call("cuMemAlloc_v2", ts=500, dur=100, api="driver"), top, nested(init, top),
             nested(call("cuDriverGetVersion", ts=1_120, dur=50, api="driver"), init, 2),
             call("cuMemFree_v2", ts=1_200, dur=10, api="driver", tid=9),
             nested(call("cuDeviceGet", ts=1_300, dur=50, api="driver"), top)]
    out = call_trees(calls)
    assert [(t.call.event, [c.event for c in t.children]) for t in out] == [
        ("cuMemAlloc_v2", []),
        ("cudaGetDeviceCount", ["cuInit", "cuDriverGetVersion", "cuDeviceGet"]),
        ("cuMemFree_v2", [])]
    assert call_trees([]) == []


def test_a_child_without_its_parent_in_the_batch_is_a_tree_of_its_own():
    parent = call("cudaMalloc", ts=1_000, dur=1_000)
    orphan = nested(call("cuMemAlloc_v2", ts=1_100, dur=10, api="driver"), parent)
    assert [t.call.event for t in call_trees([orphan])] == ["cuMemAlloc_v2"]


