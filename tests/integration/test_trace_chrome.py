"""cudaprobe trace --format chrome on the toolkit's real libcudart (and Debian's
real libcuda): the trace file is checked with tests/chrome_check.py and
compared with what the workload says it called."""

from __future__ import annotations

import collections
import os

from .. import chrome_check
from ..conftest import build_workload
from .conftest import expected_calls, run_cudaprobe

ORDER = ["cudaGetDeviceCount", "cudaMalloc", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset",
         "cudaLaunchKernel", "cudaStreamCreate", "cudaEventElapsedTime", "cudaFree",
         "cudaDeviceSynchronize"]


def trace_chrome(path, *args, command, env=None):
    proc = run_cudaprobe("trace", "-o", str(path), *args, "--", *command, env=env)
    assert proc.returncode == 0, proc.stderr
    events, terminated = chrome_check.load_events(str(path))
    report = chrome_check.check_events(events, terminated)
    assert terminated and report.problems == [], report.problems
    return events, report, proc


def call_of(slice_event: dict) -> str:
    """The call a slice is of: its name, or for a launch named by its kernel, args.call."""
    return slice_event["args"].get("call", slice_event["name"])


def test_one_slice_per_call_on_each_thread(tmp_path, libcudart):
    exe = build_workload("runtime_calls.c")
    events, report, proc = trace_chrome(tmp_path / "calls.chrome.json", "--lib", str(libcudart),
                                        command=[str(exe), "3", "2"])
    truth = expected_calls(proc.stdout)
    slices = [e for e in events if e["ph"] == "X"]
    assert collections.Counter(call_of(e) for e in slices) == collections.Counter(
        t["event"] for t in truth)
    # a launch is named by its kernel (the workload's host function fake_kernel)
    assert {e["name"] for e in slices if call_of(e) == "cudaLaunchKernel"} == {"fake_kernel"}
    assert len(slices) == 60 and report.summary["calls"] == 60
    assert report.summary["lost_total"] == 0 and report.summary["in_flight"] == 0
    assert report.lines()[1].endswith("the slices match it")
    pid = slices[0]["pid"]
    assert report.process_names == {pid: "runtime_calls"}
    # the workload's two worker threads, each on its track with its own sequence
    assert len(report.tracks) == 2 and pid not in {tid for _, tid in report.tracks}
    for track, stats in report.tracks.items():
        assert stats.slices == 30 and report.thread_names[track] == "runtime_calls"
        mine = sorted((e for e in slices if (e["pid"], e["tid"]) == track), key=lambda e: e["ts"])
        assert [call_of(e) for e in mine] == ORDER * 3
        assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(mine, mine[1:]))
    # durations are the calls' latencies: per function they add up to the summary's
    for name, stats in report.summary["by_event"].items():
        durs = [e["dur"] for e in slices if call_of(e) == name]
        assert all(d > 0 for d in durs)
        assert abs(sum(durs) * 1000 - stats["total_ns"]) < len(durs), name
    mallocs = [e["args"] for e in slices if e["name"] == "cudaMalloc"]
    assert all(a["size"] == 1 << 20 and a["ret_name"] == "cudaErrorInsufficientDriver"
               for a in mallocs)


def test_runtime_calls_flow_to_the_driver_calls_they_made(tmp_path, libcudart, libcuda):
    exe = build_workload("runtime_calls.c")
    # libcudart dlopens libcuda.so.1 (Debian's 535: too old for CUDA 13, so the runtime
    # stops after asking its version); --format wins over the .json extension (JSONL)
    env = {**os.environ, "LD_LIBRARY_PATH": str(libcuda.parent)}
    events, report, _ = trace_chrome(tmp_path / "calls.json", "--format", "chrome",
                                     "--lib", str(libcudart), "--lib", str(libcuda),
                                     command=[str(exe), "2"], env=env)
    slices = [e for e in events if e["ph"] == "X"]
    driver = [e for e in slices if e["cat"].startswith("driver,")]
    assert driver and {e["name"] for e in driver} == {"cuDriverGetVersion"}
    # every driver call here was made by the runtime: each is a flow's end
    assert len(report.flows) == len(driver)
    for name, src, dst in report.flows:
        assert (src.name, dst.name) == ("cudaGetDeviceCount", "cuDriverGetVersion")
        assert name == "cudaGetDeviceCount -> cuDriverGetVersion"
        assert src.track == dst.track
        assert src.start_ns < dst.start_ns and dst.end_ns <= src.end_ns
    assert collections.Counter(call_of(e) for e in slices if e["cat"].startswith("runtime,")) == {
        name: 2 for name in ORDER}
