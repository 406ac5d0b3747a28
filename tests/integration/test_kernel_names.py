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

import pytest

from ..conftest import WORKLOAD_BIN, build_workload
from .conftest import expected_calls, run_cudaprobe, trace_jsonl

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
