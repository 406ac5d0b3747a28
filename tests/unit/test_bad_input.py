"""Bad input: one line on stderr, exit 2, no traceback, nothing written.

Each case runs the real `cudaprobe` in a subprocess, in a scratch directory
whose contents must be the same afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ..conftest import cudaprobe_cmd, libcudart_path

LIB = str(libcudart_path() or "/usr/local/cuda/lib64/libcudart.so")
PID_MAX = int(Path("/proc/sys/kernel/pid_max").read_text())


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A directory with an existing output file, a non-ELF 'library', an
    aarch64 ELF, an empty directory, a symlink and a non-executable file."""
    (tmp_path / "exists.jsonl").write_text("keep me\n")
    (tmp_path / "libcudart.so.12").write_text("not ELF\n")
    arm = tmp_path / "arm" / "libcudart.so.12"
    arm.parent.mkdir()
    data = bytearray(Path("/bin/true").read_bytes())
    data[18:20] = (183).to_bytes(2, "little")  # e_machine = EM_AARCH64
    arm.write_bytes(data)
    (tmp_path / "empty").mkdir()
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "exists.jsonl")
    (tmp_path / "script").write_text("#!/bin/sh\n")
    cut = tmp_path / "cut" / "libcudart.so.12"  # its ELF header whole, its sections gone
    cut.parent.mkdir()
    cut.write_bytes(Path("/bin/true").read_bytes()[:3000])
    os.mkfifo(tmp_path / "fifo.so")  # open() would wait for a writer for good
    return tmp_path


def snapshot(d: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() and not p.is_symlink()
                                    else None) for p in sorted(d.rglob("*"))}


def run(scratch: Path, *args: str, user: str | None = None) -> subprocess.CompletedProcess:
    before = snapshot(scratch)
    prefix = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user else []
    proc = subprocess.run([*prefix, *cudaprobe_cmd(*args)], capture_output=True, text=True,
                          timeout=120, cwd=scratch)
    assert snapshot(scratch) == before, "something was written"
    return proc


def assert_one_line(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("cudaprobe: ")
    for f in fragments:
        assert f in lines[0]
    return lines[0]


CASES = {
    "lib missing": (["--lib", "/nonexistent/libcudart.so"],
                    ["CUDA library '/nonexistent/libcudart.so': no such file"]),
    "lib directory without CUDA": (["--lib", "empty"], ["directory holds no libcudart"]),
    "lib not ELF": (["--lib", "libcudart.so.12"], ["not an ELF file"]),
    "lib wrong architecture": (["--lib", "arm/libcudart.so.12"],
                               ["built for EM_AARCH64, not x86-64"]),
    "lib lacking every symbol": (["--lib", "/bin/true", "-d", "1"],
                                 ["defines none of the selected functions"]),
    "lib lacking every selected symbol, with COMMAND": (
        ["--lib", LIB, "-e", "cuInit", "--", "/bin/true"],
        ["defines none of the selected functions (cuInit)"]),
    "lib truncated ELF": (["--lib", "cut/libcudart.so.12"], ["malformed ELF"]),
    "lib is a FIFO": (["--lib", "fifo.so", "-d", "1"], ["'fifo.so': not a regular file"]),
    "unknown event": (["--lib", LIB, "-e", "cudaMallok"],
                      ["unknown event or category 'cudaMallok'", "did you mean cudaMalloc"]),
    "output exists": (["--lib", LIB, "-o", "exists.jsonl"],
                      ["'exists.jsonl' exists", "use --force"]),
    "output unwritable": (["--lib", LIB, "-o", "/sys/calls.jsonl"],
                          ["'/sys/calls.jsonl' is not writable: Permission denied"]),
    "output directory missing": (["--lib", LIB, "-o", "nodir/calls.jsonl"],
                                 ["does not exist"]),
    "output is a directory": (["--lib", LIB, "-o", "empty"], ["is a directory"]),
    "output is a symlink": (["--lib", LIB, "-o", "link.jsonl", "--force"],
                            ["is a symbolic link"]),
    "bad format": (["-f", "xml"], ["Invalid value for '-f' / '--format': 'xml'",
                                   "(see `cudaprobe trace --help`)"]),
    "bad duration": (["-d", "0"], ["Invalid value for '-d' / '--duration'"]),
    "bad api": (["--api", "gpu"], ["Invalid value for '--api'"]),
    "duration nan": (["-d", "nan"], ["'nan' is not a number of seconds above 0"]),
    "duration inf": (["-d", "inf"], ["'inf' is not a number of seconds above 0"]),
    "comm empty": (["--comm", ""], ["--comm needs a process name"]),
    "ringbuf too big": (["--ringbuf-pages", "1048576"], ["more than 524288 pages (2 GiB"]),
    "otlp unclosed IPv6": (["--otlp", "http://[::1"], ["is not an OTLP/HTTP endpoint"]),
    "otlp not a URL": (["--otlp", "notaurl"], ["'notaurl' is not an OTLP/HTTP endpoint"]),
    "unknown option": (["--bogus"], ["No such option '--bogus'"]),
    "force without output": (["--force", "--", "/bin/true"], ["--force goes with -o FILE"]),
    "mode without output": (["--mode", "0644"], ["--mode goes with -o FILE"]),
    "max-size to stdout": (["--max-size", "1M", "-o", "-"], ["--max-size goes with -o FILE"]),
    "dump-bpf with output": (["--dump-bpf", "-o", "new.jsonl"],
                             ["--dump-bpf prints the BPF program and exits"]),
    "pid with command": (["--pid", "1", "--", "/bin/true"], ["leave out --pid"]),
    "wait without pid": (["--wait"], ["--wait goes with --pid"]),
    "bad mode": (["--mode", "888", "-o", "new.jsonl"], ["not an octal file mode"]),
    "bad max-size": (["--max-size", "lots", "-o", "new.jsonl"], ["not a size"]),
    "command not found": (["--lib", LIB, "--", "no-such-command-here"],
                          ["command not found: 'no-such-command-here'"]),
    "command is a directory": (["--lib", LIB, "--", "/etc"], ["cannot run '/etc': is a directory"]),
    "command not executable": (["--lib", LIB, "--", "./script"],
                               ["cannot run './script': not executable"]),
    "pid does not exist": (["--pid", str(PID_MAX)], [f"pid {PID_MAX}: no such process"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_trace_bad_input(scratch, case):
    if os.geteuid() != 0:
        pytest.skip("as root, so that each check, not the root check, is what stops it")
    args, fragments = CASES[case]
    assert_one_line(run(scratch, "trace", *args), *fragments)


def test_unknown_command_and_top_level_option(scratch):
    assert_one_line(run(scratch, "tarce"), "No such command 'tarce'")
    assert_one_line(run(scratch, "--bogus"), "No such option '--bogus'")


def test_not_root(scratch):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to become another user")
    line = assert_one_line(run(scratch, "trace", "--lib", LIB, "-o", "new.jsonl", "--",
                               "/bin/true", user="65534"))
    assert line == "cudaprobe: tracing needs root (CAP_BPF and CAP_PERFMON) (run it with sudo)"


def test_pid_that_exited(scratch):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    proc = subprocess.Popen(["true"])
    proc.wait()  # reaped: its pid names no process now (until reused)
    assert_one_line(run(scratch, "trace", "--pid", str(proc.pid)),
                    f"pid {proc.pid}: no such process")


def test_pid_not_using_cuda(scratch):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.2)
        assert_one_line(run(scratch, "trace", "--pid", str(sleeper.pid), "-o", "new.jsonl"),
                        f"pid {sleeper.pid} (sleep) is not using CUDA", "add --wait")
    finally:
        sleeper.kill()
        sleeper.wait()


def test_verbose_shows_the_traceback(scratch):
    proc = run(scratch, "-v", "trace", "--lib", "/nonexistent/libcudart.so")
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "LibraryNotFound" in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("cudaprobe: CUDA library")


def test_pid_that_is_a_zombie(scratch):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    proc = subprocess.Popen(["true"])
    time.sleep(0.3)  # exited, not reaped: a zombie
    try:
        assert_one_line(run(scratch, "trace", "--pid", str(proc.pid)),
                        f"pid {proc.pid}: true has exited (a zombie")
    finally:
        proc.wait()
