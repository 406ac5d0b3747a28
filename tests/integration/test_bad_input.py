"""Bad input that only root reaches (the root check comes first): one line on
stderr, exit 2, no traceback, nothing written. What any user is told, a user
who is not root included, is in tests/unit/test_bad_input.py.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from ..badinput import LIB, assert_one_line, run
from ..conftest import HANG_S

PID_MAX = int(Path("/proc/sys/kernel/pid_max").read_text())

# arguments of `cudaprobe trace` -> fragments of the one line it must print
CASES = {
    "lib missing": (["--lib", "/nonexistent/libcudart.so"],
                    ["CUDA library '/nonexistent/libcudart.so': no such file"]),
    "lib directory without CUDA": (["--lib", "empty"], ["directory holds no libcudart"]),
    "lib not ELF": (["--lib", "libcudart.so.12"], ["not an ELF file"]),
    "lib wrong architecture": (["--lib", "arm/libcudart.so.12"],
                               ["built for EM_AARCH64, not x86-64"]),
    "lib truncated ELF": (["--lib", "cut/libcudart.so.12"], ["malformed ELF"]),
    "lib is a FIFO": (["--lib", "fifo.so", "-d", "1"], ["'fifo.so': not a regular file"]),
    "lib is a symlink loop": (["--lib", "loop.so"], ["'loop.so'", "Too many levels of symbolic"]),
    "lib lacking every symbol": (["--lib", "/bin/true", "-d", "1"],
                                 ["defines none of the selected functions"]),
    "lib lacking every selected symbol, with COMMAND": (
        ["--lib", LIB, "-e", "cuInit", "--", "/bin/true"],
        ["defines none of the selected functions (cuInit)"]),
    "output exists": (["--lib", LIB, "-o", "exists.jsonl"],
                      ["'exists.jsonl' exists", "use --force"]),
    "output unwritable": (["--lib", LIB, "-o", "/sys/calls.jsonl"],
                          ["'/sys/calls.jsonl' is not writable: Permission denied"]),
    "output directory missing": (["--lib", LIB, "-o", "nodir/calls.jsonl"],
                                 ["does not exist"]),
    "output is a directory": (["--lib", LIB, "-o", "empty"], ["is a directory"]),
    "output is a symlink": (["--lib", LIB, "-o", "link.jsonl", "--force"],
                            ["is a symbolic link"]),
    "command not found": (["--lib", LIB, "--", "no-such-command-here"],
                          ["command not found: 'no-such-command-here'"]),
    "command is a directory": (["--lib", LIB, "--", "/etc"], ["cannot run '/etc': is a directory"]),
    "command not executable": (["--lib", LIB, "--", "./script"],
                               ["cannot run './script': not executable"]),
    "pid does not exist": (["--pid", str(PID_MAX)], [f"pid {PID_MAX}: no such process"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_trace_bad_input(scratch, case):
    args, fragments = CASES[case]
    assert_one_line(run(scratch, "trace", *args), *fragments)


def test_pid_that_exited(scratch):
    proc = subprocess.Popen(["true"])
    proc.wait()  # reaped: its pid names no process now (until reused)
    assert_one_line(run(scratch, "trace", "--pid", str(proc.pid)),
                    f"pid {proc.pid}: no such process")


def test_pid_that_is_a_zombie(scratch):
    proc = subprocess.Popen(["true"])
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    try:
        assert_one_line(run(scratch, "trace", "--pid", str(proc.pid)),
                        f"pid {proc.pid}: true has exited (a zombie")
    finally:
        proc.wait()


def test_pid_not_using_cuda(scratch):
    sleeper = subprocess.Popen(["sleep", "infinity"])  # Popen returns once it has exec'd
    try:
        assert_one_line(run(scratch, "trace", "--pid", str(sleeper.pid), "-o", "new.jsonl"),
                        f"pid {sleeper.pid} (sleep) is not using CUDA", "add --wait")
    finally:
        sleeper.kill()
        sleeper.wait()


def test_verbose_shows_the_traceback_of_a_library_not_found(scratch):
    proc = run(scratch, "-v", "trace", "--lib", "/nonexistent/libcudart.so")
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "LibraryNotFound" in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("cudaprobe: CUDA library")


def kernel_thread() -> int:
    """A kernel thread's pid (kthreadd is 2 where the pid namespace is the host's)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[6]) & 0x00200000:
                return int(entry.name)
    pytest.skip("no kernel thread visible in this pid namespace")


@pytest.mark.parametrize("command", ["trace", "stats", "memory"])
def test_pid_that_is_a_kernel_thread(scratch, command):
    pid = kernel_thread()
    line = assert_one_line(run(scratch, command, "--pid", str(pid)),
                           f"pid {pid} (", ") is a kernel thread", "no user address space")
    assert "sudo" not in line and "not using CUDA" not in line


def wait_until_named(pid: int, comm: str) -> None:
    deadline = time.monotonic() + HANG_S
    while Path(f"/proc/{pid}/comm").read_text().strip() != comm:
        assert time.monotonic() < deadline, f"pid {pid} never became {comm}"
        time.sleep(0.01)


def test_pid_in_another_mount_namespace_not_using_cuda(scratch):
    sleeper = subprocess.Popen(["unshare", "-m", "sleep", "infinity"])
    try:
        wait_until_named(sleeper.pid, "sleep")  # unshare has exec'd it
        assert_one_line(run(scratch, "trace", "--pid", str(sleeper.pid)),
                        f"pid {sleeper.pid} (sleep) is not using CUDA",
                        f"pid {sleeper.pid} runs in another mount namespace", "add --wait")
    finally:
        sleeper.kill()
        sleeper.wait()
