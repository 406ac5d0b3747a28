"""Output files through the real CLI: private by default, --mode exactly,
and --max-size caps them (a long run's disk use is bounded)."""

from __future__ import annotations

import json
import os
import stat

from ..conftest import build_workload
from .conftest import run_cudaprobe
from .steady import trace_steady, trailer


def test_max_size_caps_the_file_counts_the_rest_and_keeps_the_trailer(tmp_path, libcudart):
    cap = 100 * 1024
    proc, out = trace_steady(tmp_path, libcudart, 5000, "--max-size", "100K")
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text().splitlines()
    s = json.loads(lines[-1])["summary"]
    rows = len(lines) - 1
    assert s["calls"] == 15000
    assert s["lost"]["output_max_size"] == s["calls"] - rows > 0
    assert s["rows"] == rows and s["rows"] + s["lost_total"] == s["calls"]  # what the file holds
    # whole rows, stopped at the first chunk of 64 to cross the cap
    size_of_rows = sum(len(line) + 1 for line in lines[:-1])
    longest = max(len(line) + 1 for line in lines[:-1])
    assert cap <= size_of_rows < cap + 64 * longest
    assert all(json.loads(line)["event"] for line in lines[:-1])
    assert proc.stderr.count("reached --max-size 100.0 KiB: further calls are counted, "
                             "not written") == 1


def test_max_size_reached_is_a_loss_for_strict(tmp_path, libcudart):
    proc, _out = trace_steady(tmp_path, libcudart, 5000, "--max-size", "50K", "--strict")
    assert proc.returncode == 3
    assert "events lost: exit 3 (--strict)" in proc.stderr


def test_dev_null_takes_the_output_without_force(libcudart):
    """-o /dev/null: nothing in it to overwrite, so no --force is asked for."""
    proc = run_cudaprobe("trace", "-o", "/dev/null", "--lib", str(libcudart), "--",
                         str(build_workload("runtime_calls.c")), "1", "1")
    assert proc.returncode == 0, proc.stderr
    assert "10 calls in" in proc.stderr and "0 lost" in proc.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_output_is_private_whatever_the_umask_and_mode_when_asked(tmp_path, libcudart):
    _proc, out = trace_steady(tmp_path, libcudart, 10, umask=0)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    out.unlink()
    proc, out = trace_steady(tmp_path, libcudart, 10, "--mode", "0640", umask=0o077)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert trailer(out)["calls"] == 30
