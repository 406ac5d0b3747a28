"""Long runs: the pairing map is swept of threads that exited mid-call.
cudaprobe's memory over a 10-minute run is scripts/soak's job
(docs/reliability.md has its result); --max-size is in test_output_files.py."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from ..conftest import HANG_S, build_workload, cudaprobe_cmd


# "slots": each thread pairs in a slot of its own; "hash": one slot for all
# (CUDAPROBE_PAIR_THREADS=1), so the first thread to call has it and the other
# five pair through the `inflight` hash: both are swept
@pytest.mark.parametrize("pair_threads", ["64", "1"], ids=["slots", "hash"])
def test_calls_of_threads_that_exited_mid_call_are_swept_not_left_in_flight(tmp_path,
                                                                            pair_threads):
    exe = build_workload("exit_mid_call.c")
    out = tmp_path / "calls.jsonl"
    # the process lingers past a sweep period with its 6 threads gone
    proc = subprocess.run(cudaprobe_cmd("trace", "--lib", str(exe), "-o", str(out), "--",
                                        str(exe), "6", "2500"),
                          capture_output=True, text=True, timeout=HANG_S,
                          env={**os.environ, "CUDAPROBE_PAIR_THREADS": pair_threads})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "6 threads exited mid-call\n"
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    s = lines[-1]["summary"]
    assert [c["event"] for c in lines[:-1]] == ["cudaGetDeviceCount"] * 6
    assert s["exited_mid_call"] == 6
    assert s["in_flight"] == 0  # not reported as still running: they never will return
    assert s["lost_total"] == 0
    assert "6 calls in" in proc.stderr and "6 ended with their thread" in proc.stderr
