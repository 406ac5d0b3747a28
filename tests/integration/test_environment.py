"""The machine made ready by cudaprobe itself: tracefs, kernel headers.

Each case runs cudaprobe in a private mount namespace (unshare -m) where
tracefs is unmounted or /lib/modules, /usr/src hidden under an empty tmpfs,
so the machine, and anything else running on it, is not touched.
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ..conftest import HANG_S, cudaprobe_cmd
from .steady import steady_trace_argv, trailer


def run_in_namespace(setup: str, argv: list[str], env: dict | None = None,
                     timeout: float = HANG_S) -> subprocess.CompletedProcess:
    """`setup` (fixed shell text, never user input) runs first, then `argv`."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is missing")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot make a mount namespace here")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-ec",
                           f'{setup}\nexec "$@"', "sh", *argv],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def short_trace(tmp_path: Path, libcudart: Path, *extra: str) -> list[str]:
    return steady_trace_argv(tmp_path / "calls.jsonl", libcudart, 20, *extra)


RELEASE = os.uname().release
HIDE_HEADERS = "mount -t tmpfs cudaprobe-test /lib/modules"


@pytest.mark.parametrize("mode", ["multi", "perf"])
def test_tracefs_is_mounted_when_missing(tmp_path, libcudart, mode):
    """bcc's perf-event detach reads tracefs: unmounted, it used to fail with
    "Failed to detach BPF from uprobe"."""
    proc = run_in_namespace(
        "umount /sys/kernel/tracing 2>/dev/null || true\n"
        "umount /sys/kernel/debug 2>/dev/null || true",
        short_trace(tmp_path, libcudart, "-e", "cudaMalloc,cudaFree"),
        env={"CUDAPROBE_ATTACH": mode})
    assert proc.returncode == 0, proc.stderr
    assert "cudaprobe: mounted tracefs at /sys/kernel/tracing" in proc.stderr
    assert "Failed to detach" not in proc.stderr and "Traceback" not in proc.stderr
    assert trailer(tmp_path / "calls.jsonl")["calls"] == 40


def test_tracefs_that_cannot_be_mounted_is_one_clear_error(tmp_path, libcudart):
    proc = run_in_namespace(
        "umount /sys/kernel/tracing 2>/dev/null || true\n"
        "mount -t tmpfs cudaprobe-test /sys/kernel",  # no tracing/ mount point left
        short_trace(tmp_path, libcudart))
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("cudaprobe: tracefs is not mounted at /sys/kernel/tracing and "
                           "mounting it failed: ")
    assert line.endswith("(mount -t tracefs nodev /sys/kernel/tracing)")
    assert not (tmp_path / "calls.jsonl").exists()


def test_missing_kernel_headers_fall_back_to_distro_headers(tmp_path, libcudart):
    if not list(Path("/usr/src").glob("linux-headers-*")):
        pytest.skip("no distro kernel headers installed to fall back on")
    machine_build = Path(f"/lib/modules/{RELEASE}/build")
    before = os.readlink(machine_build) if machine_build.is_symlink() else None
    proc = run_in_namespace(HIDE_HEADERS, short_trace(tmp_path, libcudart))
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "no headers for kernel" in line]
    assert len(notes) == 1
    assert notes[0].startswith(f"cudaprobe: no headers for kernel {RELEASE}: using "
                               "linux-headers-")
    assert trailer(tmp_path / "calls.jsonl")["calls"] == 60
    # the links went into the namespace's tmpfs, not the machine's /lib/modules
    assert (os.readlink(machine_build) if machine_build.is_symlink() else None) == before


def test_no_headers_and_no_fallback_is_one_clear_error(tmp_path, libcudart):
    if Path("/sys/kernel/kheaders.tar.xz").exists():
        pytest.skip("the kernel has CONFIG_IKHEADERS: bcc needs no header files")
    proc = run_in_namespace(f"{HIDE_HEADERS}\nmount -t tmpfs cudaprobe-test /usr/src",
                            short_trace(tmp_path, libcudart))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"cudaprobe: no kernel headers for {RELEASE} and no distro headers to fall back on "
        "(apt-get install linux-headers-amd64 (Debian) or linux-headers-generic (Ubuntu))"]
    assert not (tmp_path / "calls.jsonl").exists()


def test_without_libbcc_what_needs_no_bcc_works_and_tracing_says_why_not(tmp_path, libcudart):
    """libbcc.so.0 unreadable (an empty file bound over it): `list` and
    `--help` never load it, and tracing says in one line what is missing."""
    libbcc = Path(ctypes.util.find_library("bcc") or "libbcc.so.0")
    real = next((d / libbcc.name).resolve() for d in map(Path, ("/lib/x86_64-linux-gnu",
                "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"))
                if (d / libbcc.name).exists())
    hide = f"mount --bind /dev/null {real}"
    listed = run_in_namespace(hide, cudaprobe_cmd("list", "-e", "cudaMalloc", "--lib",
                                                  str(libcudart)))
    assert listed.returncode == 0, listed.stderr
    assert "cudaMalloc" in listed.stdout
    traced = run_in_namespace(hide, cudaprobe_cmd("trace", "--lib", str(libcudart), "-o",
                                                  str(tmp_path / "calls.jsonl"), "--",
                                                  "/bin/true"))
    assert traced.returncode == 2
    last = traced.stderr.splitlines()[-1]
    assert last.startswith("cudaprobe: the bcc Python module is not importable: its library: "
                           ), traced.stderr
    assert f"{libbcc.name}: file too short" in last
    assert "Traceback" not in traced.stderr
    assert not (tmp_path / "calls.jsonl").exists()
