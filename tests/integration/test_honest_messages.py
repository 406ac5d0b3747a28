"""What cudaprobe says when there is nothing to show: a command that made no
CUDA call is told whether it loaded CUDA at all; and trace, doctor and list
count functions and symbols the same way."""

from __future__ import annotations

import re

from cudaprobe.catalogue.count import count_text
from cudaprobe.catalogue.functions import FUNCTIONS, RUNTIME
from cudaprobe.targets.elfsyms import read_symbols

from ..conftest import build_workload, libcudart_path
from .conftest import run_cudaprobe


def test_a_command_without_cuda_is_told_so():
    proc = run_cudaprobe("trace", "--api", "runtime", "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert ("cudaprobe: true made no CUDA call and mapped no CUDA library (no libcudart, "
            "libcuda, or CUDA code of its own)") in proc.stderr.splitlines()
    assert "0 calls in" in proc.stderr  # the table's summary: where the rows go


def test_a_cuda_command_without_the_traced_calls_is_told_what_it_maps():
    exe = build_workload("runtime_calls.c")
    proc = run_cudaprobe("trace", "--api", "runtime", "-e", "cudaHostAlloc", "--", str(exe), "1")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if "made none of the traced calls" in x)
    assert line.startswith(f"cudaprobe: {exe} made none of the traced calls, though it maps ")
    assert "libcudart.so" in line and "no CUDA call" not in proc.stderr
    # with --lib, what it maps is not looked at: nothing is claimed about it
    proc = run_cudaprobe("trace", "--lib", str(libcudart_path()), "-e", "cudaHostAlloc", "--",
                         str(exe), "1")
    assert f"cudaprobe: {exe} made none of the traced calls" in proc.stderr.splitlines()


def test_a_command_that_made_calls_is_not_told(libcudart):
    exe = build_workload("runtime_calls.c")
    proc = run_cudaprobe("trace", "--lib", str(libcudart), "--", str(exe), "1")
    assert proc.returncode == 0 and "made no" not in proc.stderr and "made none" not in proc.stderr


def test_trace_doctor_and_list_count_alike(libcudart):
    defined = read_symbols(str(libcudart)).functions
    runtime = [f for f in FUNCTIONS if f.api == RUNTIME]
    found = [f for f in runtime if any(s in defined for s in f.symbols)]
    expected = count_text([f.name for f in found],
                          [s for f in found for s in f.symbols if s in defined])
    assert re.fullmatch(r"\d+ functions, \d+ symbols", expected)
    trace = run_cudaprobe("trace", "-e", "all", "--api", "runtime", "--lib", str(libcudart),
                          "--", "true")
    assert f"cudaprobe: tracing {expected} in " in trace.stderr, trace.stderr
    doctor = run_cudaprobe("doctor", "--lib", str(libcudart))
    assert f", {expected} (of {len(runtime)} catalogue functions)" in doctor.stdout
    listed = run_cudaprobe("list", "--api", "runtime")
    catalogue = count_text([f.name for f in runtime], [s for f in runtime for s in f.symbols])
    # "312 functions, 380 symbols; 380 of them exported by ..."
    assert listed.stdout.rstrip().splitlines()[-1].strip().split(";")[0] == catalogue
    if len(found) == len(runtime):  # a library with every catalogue symbol: one figure
        assert catalogue == expected


def test_stats_of_a_command_without_cuda_says_so_too():
    proc = run_cudaprobe("stats", "--api", "runtime", "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert "cudaprobe: true made no CUDA call and mapped no CUDA library" in proc.stderr
