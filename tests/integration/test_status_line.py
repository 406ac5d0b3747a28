"""The status line under a real terminal: `trace -o FILE` with stderr on a pty
shows it (rich's Live), with stderr on a pipe it does not."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios

import pytest

from ..conftest import HANG_S, build_workload, cudaprobe_cmd

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # rich's colours and cursor moves


def read_all(fd: int, proc: subprocess.Popen, timeout: float = HANG_S) -> str:
    out = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the other end closed (EIO)
                break
            if not data:
                break
            out += data
        elif proc.poll() is not None:
            break
    proc.wait(timeout)
    return out.decode(errors="replace")


def test_status_line_on_a_terminal_while_rows_go_to_a_file(tmp_path, libcudart):
    exe = build_workload("runtime_calls.c")
    out = tmp_path / "calls.jsonl"
    master, slave = pty.openpty()
    proc = subprocess.Popen(cudaprobe_cmd("trace", "--lib", str(libcudart), "-o", str(out),
                                          "--", str(exe), "300"),
                            stdout=subprocess.DEVNULL, stderr=slave, stdin=subprocess.DEVNULL,
                            env={**os.environ, "COLUMNS": "160"})
    os.close(slave)
    try:
        shown = ANSI.sub("", read_all(master, proc))
    finally:
        os.close(master)
    assert proc.returncode == 0, shown
    lines = re.findall(r"cudaprobe: \d+s, [\d,]+ calls/s, [\d,]+ rows written to (\S+), "
                       r"([\d,]+) lost\. Ctrl-C to stop", shown)
    assert lines and {where for where, _ in lines} == {str(out)}, shown
    assert all(lost == "0" for _, lost in lines)
    assert "3000 calls in" in shown  # the summary after it, on the terminal
    assert len(out.read_text().splitlines()) == 3001  # the rows went to the file


def test_no_status_line_when_stderr_is_not_a_terminal(tmp_path, libcudart):
    exe = build_workload("runtime_calls.c")
    proc = subprocess.run(cudaprobe_cmd("trace", "--lib", str(libcudart), "-o",
                                        str(tmp_path / "calls.jsonl"), "--", str(exe), "30"),
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    assert "Ctrl-C to stop" not in proc.stderr and "\x1b[" not in proc.stderr
    assert "300 calls in" in proc.stderr


def _terminal(width: int) -> tuple[int, int]:
    """A pty of `width` columns: (master, slave)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, width, 0, 0))
    return master, slave


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_table_on_a_terminal_fits_and_keeps_details_and_errors(libcudart, width):
    """`trace -- COMMAND` on a terminal of 80, 100 and 160 columns (its size, not
    $COLUMNS): the rows go to stderr, the command keeps stdout; each row is
    TIME, PROCESS, PID, EVENT and 30 characters of DETAILS at least, and a
    failed call says its error."""
    exe = build_workload("runtime_calls.c")
    master, slave = _terminal(width)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(cudaprobe_cmd("trace", "--lib", str(libcudart), "-e",
                                          "cudaMalloc,cudaLaunchKernel", "--", str(exe), "1"),
                            stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                            env=env)
    os.close(slave)
    try:
        shown = ANSI.sub("", read_all(master, proc)).replace("\r", "")
    finally:
        os.close(master)
    stdout = proc.stdout.read().decode()
    assert proc.returncode == 0, shown
    assert "cudaMalloc" in stdout and "TIME(ms)" not in stdout  # the command's own
    lines = shown.splitlines()
    assert all(len(line) <= width for line in lines), [line for line in lines
                                                        if len(line) > width]
    header = next(line for line in lines if line.startswith("  TIME(ms)"))
    assert header.split()[:3] == ["TIME(ms)", "PROCESS", "PID"] and "EVENT" in header
    details = header.rindex(" ") + 1
    assert width - details >= 30
    malloc = next(line for line in lines if " cudaMalloc " in line)
    launch = next(line for line in lines if " cudaLaunchKernel " in line)
    assert malloc.split()[2] == str(proc.pid) or malloc.split()[2].isdigit()
    if width == 80:  # the error's short name, then the arguments
        assert malloc[details:].startswith("InsufficientDriver: devPtr=- ")
        assert launch[details:].startswith("InsufficientDriver: func=0x")
    elif width == 160:
        assert "cudaErrorInsufficientDriver" in malloc
        assert malloc[details:].startswith("devPtr=- size=1.0 MiB")
    else:
        assert "cudaE" in malloc and malloc[details:].startswith("devPtr=- size=1.0 MiB")
