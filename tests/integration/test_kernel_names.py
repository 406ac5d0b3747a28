"""Kernel names for runtime launches, from nvcc-built programs: the executable
with the runtime linked statically (probed in the executable itself, through
.symtab) or shared, templates, a namespace, and a kernel in a shared library.

Without a GPU the launches fail, but each passes its kernel's host stub,
which cudaprobe names from the process's maps and the object's symbols. The
workload waits a moment after its first call: the tracer is woken by a
process's first event and reads its maps then, and these programs would
otherwise exit within a millisecond.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from ..conftest import HANG_S, WORKLOAD_BIN, WORKLOADS, build_workload, cudaprobe_cmd
from .conftest import expected_calls, run_cudaprobe, trace_jsonl
from .memstub import build_stub_runtime
from .running import Lines, started, wait_state

LINGER_MS = "200"


def kernels_static():
    return build_workload("kernels.cu", "kernels_static")


def kernels_shared():
    build_workload("libkern.cu", "libkern.so",
                   extra=["-shared", "-Xcompiler", "-fPIC", "-cudart=shared"])
    return build_workload("kernels.cu", "kernels_shared",
                          extra=["-cudart=shared", "-DWITH_LIBKERN", f"-L{WORKLOAD_BIN}",
                                 "-lkern", "-Xlinker", f"-rpath,{WORKLOAD_BIN}"])


def launches(calls: list[dict]) -> list[tuple[str, str, str | None]]:
    return [(c["event"], c["args"]["func"], c["args"].get("func_name"))
            for c in calls if c["category"] == "kernel"]


@pytest.mark.parametrize("flavour", ["static", "shared"])
def test_runtime_launches_named(tmp_path, libcudart, flavour):
    exe = kernels_static() if flavour == "static" else kernels_shared()
    lib = str(exe) if flavour == "static" else str(libcudart)
    calls, summary, proc = trace_jsonl(tmp_path, "--lib", lib, "--api", "runtime",
                                       command=[str(exe), LINGER_MS])
    assert proc.returncode == 0, proc.stderr
    assert summary["lost_total"] == 0
    truth = [(t["event"], t["func"], t["func_name"]) for t in expected_calls(proc.stdout)]
    assert len(truth) == (5 if flavour == "static" else 6)
    assert launches(calls) == truth
    ex = next(c for c in calls if c["event"] == "cudaLaunchKernelExC")
    assert ex["args"]["gridDim"] == [8, 4, 2] and ex["args"]["dynamicSmemBytes"] == 4096


def test_table_shows_the_name(libcudart):
    exe = kernels_shared()
    # cudaGetDeviceCount included: the first event is what has the maps read
    proc = run_cudaprobe("trace", "--lib", str(libcudart), "--api", "runtime", "-e",
                         "device,kernel", "--", str(exe), LINGER_MS)
    assert proc.returncode == 0, proc.stderr
    # without -o the rows of `trace -- COMMAND` go to stderr
    rows = [line for line in proc.stderr.splitlines() if "cudaLaunchKernel " in line]
    assert any("vecAdd(float const*, float const*, float*, int) gridDim=(4,1,1)" in r
               for r in rows), proc.stderr
    assert any("kern::in_library(int*, int)" in r for r in rows), proc.stderr


def child_running(pid: int, exe: str) -> int:
    """The child of `pid` that runs `exe`."""
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            for child in map(int, f.read().split()):
                if os.readlink(f"/proc/{child}/exe") == exe:
                    return child
    raise AssertionError(f"no child of {pid} runs {exe}")


def test_every_launch_named_when_two_threads_race_to_launch_a_kernel_first(tmp_path):
    """Thread 1 launches a kernel and stays in the call (racing_cudart.c) while
    thread 2 launches it and returns; then the process exits. cudaprobe is held
    stopped meanwhile, so that it reads both records with the process gone (a
    zombie: no maps). The record that reached the ring first (thread 2's) is
    named from where the launch was made, as the other is."""
    stub = build_stub_runtime(WORKLOAD_BIN / "racing", [WORKLOADS / "racing_cudart.c"])
    exe = build_workload("racing_launches.c")
    out = tmp_path / "calls.jsonl"
    proc = started(subprocess.Popen(
        cudaprobe_cmd("trace", "-o", str(out), "--lib", str(stub), "--", str(exe)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "LD_LIBRARY_PATH": str(stub.parent)}))
    lines = Lines(proc.stdout)
    lines.wait_for(lambda s: s == '{"ready":1}', "the workload")  # its probes are in
    workload = child_running(proc.pid, str(exe))
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        proc.stdin.write("go\n")
        proc.stdin.flush()
        lines.wait_for(lambda s: '"stream":1' in s, "both launches")
        wait_state(workload, "Z")  # exited; its parent, stopped, has not reaped it
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    proc.stdin.close()
    assert proc.wait(HANG_S) == 0, proc.stderr.read()
    records = [json.loads(line) for line in out.read_text().splitlines()]
    calls, summary = records[:-1], records[-1]["summary"]
    assert summary["lost_total"] == 0
    assert [c["args"]["stream"] for c in calls] == ["0x2", "0x1"]  # the later one first
    assert [c["args"].get("func_name") for c in calls] == ["racing_kernel"] * 2
