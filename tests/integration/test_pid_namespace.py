"""cudaprobe in a pid namespace of its own (a container without the host's
pids, made here with `unshare --pid --fork --mount-proc`): the probes see
host pids, which it cannot match to the pids it sees, so selecting processes
is one line and exit 2 rather than a trace of nothing; doctor says so."""

from __future__ import annotations

import subprocess

import pytest

from ..conftest import build_workload, cudaprobe_cmd

UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc"]


@pytest.mark.parametrize("select", ["command", "pid", "comm"])
def test_selecting_processes_is_one_line_and_exit_2(tmp_path, libcudart, select):
    steady = build_workload("steady_calls.c")
    args = {"command": ["--", str(steady), "3", "0", "0"], "pid": ["--pid", "1"],
            "comm": ["--comm", "steady_calls"]}[select]
    out = tmp_path / "calls.jsonl"
    proc = subprocess.run(UNSHARE + cudaprobe_cmd("trace", "--lib", str(libcudart), "-o",
                                                  str(out), *args),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("cudaprobe: cudaprobe runs in a pid namespace other than the "
                           "host's") and "--pid=host" in line
    assert "steady_calls: finished" not in proc.stderr and not out.exists()  # nothing ran


def test_doctor_says_what_cannot_be_done_there():
    proc = subprocess.run(UNSHARE + cudaprobe_cmd("doctor"), capture_output=True, text=True,
                          timeout=120)
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "pid namespace" in said and "-- COMMAND, --pid and --comm cannot select" in said
    outside = subprocess.run(cudaprobe_cmd("doctor"), capture_output=True, text=True,
                             timeout=120)
    assert "cannot select" not in outside.stdout + outside.stderr
