"""benchmarks/gputime_compare.py, which the GPU check trusts with its verdicts:
regions found between event records or after sleep kernels, their GPU time against the events', and
the drift of marker kernels against their host windows."""

from __future__ import annotations

import importlib.util

from ..conftest import REPO

spec = importlib.util.spec_from_file_location("gputime_compare",
                                              REPO / "benchmarks" / "gputime_compare.py")
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)


def row(event: str, ts: int, tid: int = 1, gpu: tuple[int, int] | None = None,
        name: str = "") -> dict:
    r = {"event": event, "ts_ns": ts, "tid": tid, "args": {"func_name": name},
         "category": "kernel" if "Launch" in event else "event"}
    if gpu:
        r["gpu"] = {"start_ns": gpu[0], "duration_ns": gpu[1]}
    return r


def test_regions_between_event_records_against_event_times():
    trace = [row("cudaEventRecord", 10), row("cudaLaunchKernel", 20, gpu=(1000, 500)),
             row("cudaLaunchKernel", 25, gpu=(1600, 400)), row("cudaEventRecord", 30),
             row("cudaLaunchKernel", 35, gpu=(9000, 1)),  # between regions: not counted
             row("cudaEventRecord", 40), row("cudaLaunchKernel", 45, gpu=(3000, 1000)),
             row("cudaEventRecord", 50), row("cudaMalloc", 60, tid=2),
             {"summary": {}}]
    program = [{"op": "a", "ms": 0.00102}, {"op": "b", "ms": 0.0012}]
    result = compare.compare_regions(trace, program, 5.0)
    assert result["ops"]["a"] == {"regions": 1, "median_error_pct": -1.961,
                                  "worst_error_pct": -1.961, "within_tolerance": 1}
    assert result["ops"]["b"]["median_error_pct"] == -16.667 and not result["pass"]
    program[1]["ms"] = 0.001
    assert compare.compare_regions(trace, program, 5.0)["pass"]
    assert not compare.compare_regions(trace, program[:1], 5.0).get("pass")


def test_event_markers_any_record_function_one_api_only():
    """cudaEventRecordWithFlags marks as cudaEventRecord does; the cuEventRecord
    inside each runtime record is not a second marker; a thread with driver
    records only is bounded by them; none at all is said, with what was looked for."""
    trace = [row("cudaEventRecordWithFlags", 10), row("cuEventRecord", 11),
             row("cudaLaunchKernel", 20, gpu=(1000, 1000)),
             row("cudaEventRecord_ptsz", 30), row("cuEventRecord", 31),
             row("cuEventRecord_ptsz", 10, tid=2),
             row("cuLaunchKernel", 20, tid=2, gpu=(5000, 2000)),
             row("cuEventRecordWithFlags", 30, tid=2)]
    program = [{"op": "a", "ms": 0.001}, {"op": "b", "ms": 0.002}]
    result = compare.compare_regions(trace, program, 5.0)
    assert result["pass"] and result["regions_trace"] == 2
    result = compare.compare_regions([row("cudaLaunchKernel", 20, gpu=(1, 1))], program, 5.0)
    assert result["regions_trace"] == 0 and not result.get("pass")
    assert "cudaEventRecord* or cuEventRecord*" in result["problem"]


def test_sleep_markers_bound_the_ops_kernels():
    """PyTorch's regions: each op's kernels follow a torch.cuda._sleep launch (its
    nested cuLaunchKernel is the same marker), up to the next one or a synchronize;
    the warm-up before the first and event calls inside do not count."""
    spin = "at::cuda::(anonymous namespace)::spin_kernel(long)"
    trace = [row("cudaLaunchKernel", 1, gpu=(1, 1), name="warmup"),
             row("cudaLaunchKernel", 10, gpu=(100, 1_000_000), name=spin),
             row("cuLaunchKernel", 11, name=spin),
             row("cudaEventCreateWithFlags", 12),
             row("cudaLaunchKernel", 20, gpu=(1_000_200, 500), name="matmul"),
             row("cuLaunchKernelEx", 25, gpu=(1_000_800, 500), name="splitk"),
             row("cudaLaunchKernel", 30, gpu=(2_000_000, 1_000_000), name=spin),
             row("cuLaunchKernel", 31, name=spin),
             row("cudaLaunchKernel", 40, gpu=(3_000_100, 2000), name="gelu"),
             row("cudaDeviceSynchronize", 50),
             row("cudaLaunchKernel", 60, gpu=(9_000_000, 7), name="after the sync"),
             row("cudaEventElapsedTime", 70)]
    program = [{"op": "matmul", "ms": 0.0011}, {"op": "gelu", "ms": 0.002}]
    result = compare.compare_regions(trace, program, 5.0, "sleep")
    assert result["regions_trace"] == 2 and result["pass"], result
    assert result["ops"]["matmul"]["median_error_pct"] == 0.0
    assert not compare.compare_regions(trace, program, 5.0, "events").get("pass")
    result = compare.compare_regions(trace[:1], program, 5.0, "sleep")
    assert "spin_kernel" in result["problem"]


def test_drift_markers_inside_host_windows():
    trace = [row("cudaLaunchKernel", 1, gpu=(5, 1), name="marker_kernel(int*)"),  # warm-up
             row("cudaLaunchKernel", 100, gpu=(150, 10), name="marker_kernel(int*)"),
             row("cudaLaunchKernel", 200, gpu=(300, 5), name="spin(long long)"),
             row("cudaLaunchKernel", 1_000_100, gpu=(1_000_170, 10), name="marker_kernel(int*)")]
    program = [{"marker": 0, "before_ns": 100, "after_ns": 200},
               {"marker": 1, "before_ns": 1_000_100, "after_ns": 1_000_200}]
    result = compare.compare_drift(trace, program)
    assert result["pass"] and result["markers_trace"] == 2
    assert (result["first_offset_us"], result["last_offset_us"], result["drift_us"]) == (
        0.05, 0.07, 0.02)
    program[1]["after_ns"] = 1_000_175  # the kernel ends after the host saw it end
    assert compare.compare_drift(trace, program)["outside_host_window"] == 1
