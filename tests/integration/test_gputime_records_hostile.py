"""--pid --gpu-time against a process (uid nobody) that makes the GPU-time
library's records memfd, which it holds, 1 TiB long once recording: a hole,
free for it. Root cudaprobe reads it in bounded chunks: its peak memory stays
within 64 MiB of a run without the hole, every call of the run is written,
and the file is said to be unreadable past its records. (Read whole, it was
a MemoryError, exit 2, every row lost.)"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from ..conftest import HANG_S, as_not_root, cudaprobe_cmd
from .conftest import build_cuda_workload
from .running import Lines, read_jsonl, started

pytestmark = pytest.mark.slow  # an injection per run: scheduled first (tests/conftest.py)

CALLS = 200


@pytest.fixture(scope="module")
def hole_exe(libcuda) -> Path:
    return build_cuda_workload("records_hole.c", libcuda)


def traced_run(tmp_path: Path, exe: Path, cupti: Path, grow: bool) -> tuple[list[dict], dict,
                                                                              str, int]:
    """The program (nobody) traced by root `trace --pid --gpu-time`: recording,
    then the records memfd grown (or not), then CALLS calls, then cudaprobe
    stopped with SIGINT. Returns (rows, summary, cudaprobe's stderr, its peak
    RSS in KiB: wait4's, of that process alone)."""
    d = tmp_path / ("grown" if grow else "baseline")
    d.mkdir()
    target = started(subprocess.Popen(as_not_root([str(exe)]), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True))
    out = Lines(target.stdout)
    out.wait_for(lambda s: s == "ready", "ready")
    tracer = started(subprocess.Popen(
        cudaprobe_cmd("trace", "-o", str(d / "calls.jsonl"), "--pid", str(target.pid),
                      "--gpu-time", "-e", "cudaMalloc"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CUDAPROBE_CUPTI": str(cupti)}))
    err = Lines(tracer.stderr)
    err.wait_for(lambda s: "attached to" in s, "attached")
    err.wait_for(lambda s: f"library is recording in pid {target.pid}" in s, "recording")

    def say(line: str, answer: str) -> None:
        target.stdin.write(line + "\n")
        target.stdin.flush()
        out.wait_for(lambda s: s == answer, answer)

    if grow:
        say("grow", "grown 1")  # the memfd was there, and is 1 TiB now
    say(f"calls {CALLS}", f"called {CALLS}")
    tracer.send_signal(signal.SIGINT)
    _, status, usage = os.wait4(tracer.pid, 0)
    tracer.returncode = os.waitstatus_to_exitcode(status)
    said = err.until_end()
    assert tracer.returncode == 0, said
    target.stdin.close()
    out.wait_for(lambda s: s == "done", "done")
    assert target.wait(timeout=HANG_S) == 0
    rows, summary = read_jsonl(d / "calls.jsonl")
    return rows, summary, said, usage.ru_maxrss


def test_a_records_memfd_made_1_tib_by_its_process_costs_no_memory_and_loses_no_row(
        tmp_path, hole_exe, fake_cupti):
    if os.geteuid() != 0:
        pytest.skip("root cudaprobe against a process of nobody's")
    _, _, _, baseline = traced_run(tmp_path, hole_exe, fake_cupti, grow=False)
    rows, summary, said, peak = traced_run(tmp_path, hole_exe, fake_cupti, grow=True)
    assert [c["event"] for c in rows] == ["cudaMalloc"] * CALLS
    assert summary["lost_total"] == 0
    assert "--gpu-time: 1 GPU-time files were unreadable" in said, said
    assert peak - baseline < 64 << 10, (peak, baseline)
