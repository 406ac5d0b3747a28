"""benchmarks/gputime_compare.py, which the GPU check trusts with its verdicts:
regions found between event records, their GPU time against the events', and
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
    r = {"event": event, "ts_ns": ts, "tid": tid, "args": {"func_name": name}}
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
