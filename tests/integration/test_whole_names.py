"""Kernel names whole, and named although the program exits at once.

two_kernels.cu launches a kernel whose mangled name is over 1 KiB and a
short-named one, and exits: no call before them, no wait after. Its maps are
gone before the tracer wakes, so the names come from what the probe recorded
at the launch (the call site's build-id and file offset). Each run has an
empty symbol cache of its own: the object is found from the command line.
driver_long_name.c makes a handle from the same long name through
cuModuleGetFunction (the stand-in libcuda, whose calls succeed).
"""

from __future__ import annotations

import json
import os

import pytest

from ..conftest import build_workload
from .conftest import expected_calls, run_cudaprobe, trace_jsonl
from .memstub import build_memstub, stub_env
from .test_trace_driver import fake_libcuda  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow  # tens of seconds: scheduled first (tests/conftest.py)

RUNS = 20
TYPES = [f"a_type_whose_name_is_long_enough_to_matter_{i:02d}" for i in range(1, 25)]
LONG_MANGLED = "_Z10long_namedIJ" + "".join(f"{len(t)}{t}" for t in TYPES) + "EEvPi"
LONG_NAME = "void long_named<" + ", ".join(TYPES) + ">(int*)"
SHORT_NAME = "short_named(int*)"


def two_kernels():
    return build_workload("two_kernels.cu", extra=["-cudart=shared"])


def cache_env(path) -> dict[str, str]:
    return {**os.environ, "CUDAPROBE_CACHE_DIR": str(path)}


def test_a_program_that_exits_at_once_is_named_every_run(tmp_path, libcudart):
    exe = two_kernels()
    assert len(LONG_MANGLED) > 1024
    named = 0
    for run in range(RUNS):
        d = tmp_path / f"run{run}"
        d.mkdir()
        calls, summary, proc = trace_jsonl(d, "--lib", str(libcudart), "--api", "runtime",
                                           command=[str(exe)], env=cache_env(d / "cache"))
        assert proc.returncode == 0, proc.stderr
        assert summary["lost_total"] == 0
        stubs = [t["func"] for t in expected_calls(proc.stdout)]
        launches = [(c["args"]["func"], c["args"].get("func_name")) for c in calls
                    if c["event"] == "cudaLaunchKernel"]
        assert [f for f, _ in launches] == [hex(int(s, 16)) for s in stubs]
        named += [n for _, n in launches] == [LONG_NAME, SHORT_NAME]
    assert named == RUNS


def test_the_table_shortens_what_jsonl_keeps_whole(tmp_path, libcudart):
    exe = two_kernels()
    proc = run_cudaprobe("trace", "--lib", str(libcudart), "--api", "runtime", "--",
                         str(exe), env=cache_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    # without -o the rows of `trace -- COMMAND` go to stderr
    rows = [line for line in proc.stderr.splitlines() if "cudaLaunchKernel " in line]
    assert any("long_named<…> gridDim=(1,1,1)" in r for r in rows), proc.stderr
    assert not any("a_type_whose" in r for r in rows), proc.stderr


def test_a_driver_handle_named_by_a_name_over_1k(tmp_path, fake_libcuda):  # noqa: F811
    exe = build_workload("driver_long_name.c",
                         extra=[f"-L{fake_libcuda.parent}", "-l:libcuda.so.1"])
    calls, summary, proc = trace_jsonl(
        tmp_path, "--lib", str(fake_libcuda), "--api", "driver",
        command=["env", f"LD_LIBRARY_PATH={fake_libcuda.parent}", str(exe)],
        env=cache_env(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr
    assert summary["lost_total"] == 0
    assert expected_calls(proc.stdout)[0]["name"] == LONG_MANGLED
    made = next(c for c in calls if c["event"] == "cuModuleGetFunction")
    assert made["args"]["name"] == LONG_MANGLED  # whole, as passed
    assert made["details"].endswith("name=long_named<…>")
    launches = [(c["event"], c["args"]["f"], c["args"].get("func_name")) for c in calls
                if c["category"] == "kernel"]
    assert launches == [("cuLaunchKernel", "0xf0000001", LONG_NAME),
                        ("cuLaunchKernelEx", "0xf0000001", LONG_NAME)]


def test_stats_by_kernel_counts_each_kernel_by_its_whole_name(tmp_path, fake_libcuda):  # noqa: F811
    """Driver launches, named by the handle cuModuleGetFunction made (traced
    along for that), counted per kernel; the table shows the short form."""
    exe = build_workload("driver_long_name.c",
                         extra=[f"-L{fake_libcuda.parent}", "-l:libcuda.so.1"])
    out = tmp_path / "stats.json"
    proc = run_cudaprobe("stats", "--by", "kernel", "--json", "-o", str(out), "--lib",
                         str(fake_libcuda), "--api", "driver", "--", "env",
                         f"LD_LIBRARY_PATH={fake_libcuda.parent}", str(exe),
                         env=cache_env(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert [(f["event"], f["count"], f["failed"]) for f in report["functions"]] == [
        (LONG_NAME, 2, 0)]
    assert report["lost_total"] == 0
    table = run_cudaprobe("stats", "--by", "kernel", "--lib", str(fake_libcuda), "--api",
                          "driver", "--", "env", f"LD_LIBRARY_PATH={fake_libcuda.parent}",
                          str(exe), env=cache_env(tmp_path / "cache"))
    rows = [line for line in table.stdout.splitlines() if "long_named<" in line]
    assert len(rows) == 1 and "long_named<…>" in rows[0] and "│     2 │" in rows[0], table.stdout


def test_call_sites_named_although_the_program_exits_at_once(tmp_path):
    """memory --stacks on a program that allocates and exits at once: its call
    sites and their callers are named from the build-id frames the probe and
    the stack walk recorded, not from maps read too late."""
    stub = build_memstub()
    exe = build_workload("leak_two.cu", extra=["-cudart=shared", "-Xcompiler",
                                               "-fno-omit-frame-pointer"])
    named = 0
    for run in range(5):
        out = tmp_path / f"memory{run}.json"
        proc = run_cudaprobe("memory", "-o", str(out), "--lib", str(stub), "--stacks", "--",
                             str(exe), "0", env={**stub_env(),
                                                 "CUDAPROBE_CACHE_DIR": str(tmp_path / str(run))})
        assert proc.returncode == 0, proc.stderr
        [p] = json.loads(out.read_text())["processes"]
        sites = [g["site"] for g in p["leaks"]]
        assert len(sites) == 2
        named += all(s[0].split("(")[0] in ("alloc_weights", "alloc_staging")
                     and s[0].endswith(f" ({exe.name})") and s[1].startswith("main+0x")
                     for s in sites)
    assert named == 5
