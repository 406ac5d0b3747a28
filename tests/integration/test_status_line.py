"""The status line under a real terminal: `trace -o FILE` with stderr on a pty
shows it (rich's Live), with stderr on a pipe it does not."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess

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
