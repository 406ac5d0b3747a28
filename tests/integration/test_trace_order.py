"""Rows in call order, a driver call under the runtime call that made it: the
toolkit's libcudart calling Debian's libcuda (cuDriverGetVersion inside
cudaGetDeviceCount), real uprobes on both."""

from __future__ import annotations

import os

from ..conftest import build_workload
from .conftest import expected_calls, trace_jsonl


def test_driver_calls_come_under_the_runtime_call_that_made_them(tmp_path, libcudart,
                                                                 libcuda):
    exe = build_workload("runtime_calls.c")
    env = {**os.environ, "LD_LIBRARY_PATH": str(libcuda.parent)}
    calls, summary, proc = trace_jsonl(tmp_path, "--lib", str(libcudart), "--lib", str(libcuda),
                                       command=[str(exe), "1"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert summary["lost_total"] == 0
    runtime = [c for c in calls if c["api"] == "runtime"]
    assert [c["event"] for c in runtime] == [t["event"] for t in expected_calls(proc.stdout)]
    assert all(c["depth"] == 0 and c["parent"] is None for c in runtime)
    driver = [c for c in calls if c["api"] == "driver"]
    assert driver, "libcudart made no driver call"
    by_ts = {c["ts_ns"]: c for c in calls}
    for c in driver:
        parent = by_ts[c["parent"]]
        assert c["depth"] == parent["depth"] + 1 and parent["tid"] == c["tid"]
        assert parent["ts_ns"] <= c["ts_ns"]
        assert c["ts_ns"] + c["duration_ns"] <= parent["ts_ns"] + parent["duration_ns"]
    # rows in the order the calls were made: each thread's by entry time
    assert [c["ts_ns"] for c in calls] == sorted(c["ts_ns"] for c in calls)
    first = calls.index(next(c for c in calls if c["event"] == "cudaGetDeviceCount"))
    assert calls[first + 1]["parent"] == calls[first]["ts_ns"]
