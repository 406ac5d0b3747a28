"""Late attach: launches of kernel handles made before cudaprobe
attached are named from the handle's own object, which the driver keeps the
name in (at byte 8 on driver 580: scripts/gpu/handle_layout.cu). The stand-in
libcuda (tests/workloads/fake_handles.c) lays its handles out the same way;
cuLibraryGetKernel runs before the attach and is never traced."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from ..conftest import HANG_S, build_workload, unique_name
from .running import Lines, Tracing

pytestmark = pytest.mark.slow  # tens of seconds: scheduled first (tests/conftest.py)

VECADD = "vecAdd(float const*, float const*, float*, int)"
LONG = "void deep::f<" + ", ".join(["Box::Inner"] * 120) + ">()"
LAUNCHES = 50


def late_launch() -> tuple[str, str]:
    lib = build_workload("fake_handles.c", "fakeh/libcuda.so.1",
                         extra=["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1"])
    exe = build_workload("late_launch.c",
                         extra=[f"-L{lib.parent}", "-l:libcuda.so.1", f"-Wl,-rpath,{lib.parent}"])
    return str(exe), str(lib.parent)


def test_handles_made_before_the_attach_are_named(tmp_path):
    exe, libdir = late_launch()
    proc = subprocess.Popen([exe, str(LAUNCHES)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "LD_LIBRARY_PATH": libdir})
    out = Lines(proc.stdout)
    out.wait_for(lambda s: s == '{"ready":1}', "ready")
    tracing = Tracing(tmp_path, "--pid", str(proc.pid), "-e", "kernel")
    tracing.wait_for("attached to")
    proc.stdin.write("go\n")
    proc.stdin.flush()
    out.wait_for(lambda s: s.startswith('{"launched"'), "launched")
    calls, summary, _err = tracing.interrupt()
    proc.stdin.close()
    assert proc.wait(timeout=HANG_S) == 0
    assert summary["lost_total"] == 0
    launches = [c for c in calls if c["event"] == "cuLaunchKernel"]
    assert len(launches) == 2 * LAUNCHES
    names = [c["args"].get("func_name") for c in launches]
    assert names == [VECADD, LONG] * LAUNCHES
    assert len(json.dumps(names[1])) > 1000  # whole, not cut
    assert all("name unknown" not in c["details"] for c in launches)


def test_named_although_the_process_exits_right_after_its_launches(tmp_path):
    """The name is read by the probe at the handle's first launch, while the
    process lives; reading /proc/PID/mem later would find it gone. 20 runs in
    one trace: processes started under a name it follows (--comm), whose
    handles are made untraced (-e kernel: launches only), as before an attach."""
    exe, libdir = late_launch()
    named = tmp_path / unique_name("late")
    shutil.copy(exe, named)
    tracing = Tracing(tmp_path, "--comm", named.name, "-e", "kernel",
                      "--lib", f"{libdir}/libcuda.so.1")
    tracing.wait_for("following every process named")
    pids = []
    for _ in range(20):
        proc = subprocess.Popen([str(named), "3", "exit"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "LD_LIBRARY_PATH": libdir})
        out = Lines(proc.stdout)
        out.wait_for(lambda s: s == '{"ready":1}', "ready")
        # its own probes (links per process) come at the trace loop's next poll
        tracing.wait_for(f"pid {proc.pid} ({named.name}) started under the name")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.wait(timeout=HANG_S) == 0
        pids.append(proc.pid)
    calls, summary, _err = tracing.interrupt()
    assert summary["lost_total"] == 0
    for run, pid in enumerate(pids):
        names = [c["args"].get("func_name") for c in calls
                 if c["pid"] == pid and c["event"] == "cuLaunchKernel"]
        assert names == [VECADD, LONG] * 3, (run, names)
