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
from rich.cells import cell_len

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


def _terminal(width: int) -> tuple[int, int]:
    """A pty of `width` columns: (master, slave)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, width, 0, 0))
    return master, slave


def on_terminal(argv: list[str], width: int, stdout=subprocess.PIPE,
                env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run `argv` with stderr (and stdout, given STDOUT) on a pty of `width`
    columns (its size, not $COLUMNS): its exit status, what the terminal
    showed (colours and cursor moves taken out), what went to stdout."""
    master, slave = _terminal(width)
    env = {**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
           **(env or {})}
    proc = subprocess.Popen(argv, stdout=slave if stdout is None else stdout, stderr=slave,
                            stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    try:
        shown = ANSI.sub("", read_all(master, proc)).replace("\r", "")
    finally:
        os.close(master)
    out = proc.stdout.read().decode() if proc.stdout is not None else ""
    return proc.returncode, shown, out


def test_a_drain_says_how_far_it_is(tmp_path, libcudart):
    """The trace has ended, the rows captured are still being written: the
    status line says how many of the calls counted are written. (Said after a
    second of draining; CUDAPROBE_DRAIN_SAY_S=0 says it at once, so that the
    test does not hang on the machine's speed.)"""
    exe = build_workload("runtime_calls.c")
    out = tmp_path / "calls.jsonl"
    rc, shown, _ = on_terminal(  # 400 columns: the line whole, the path is long
        cudaprobe_cmd("trace", "--lib", str(libcudart), "-o", str(out), "--", str(exe), "300"),
        400, stdout=subprocess.DEVNULL, env={"CUDAPROBE_DRAIN_SAY_S": "0"})
    assert rc == 0, shown
    said = re.findall(r"cudaprobe: writing (\S+): ([\d,]+) rows of 3,000 calls \((\d+)%\); "
                      r"Ctrl-C stops it, the rest counted as lost", shown)
    assert said and {where for where, _, _ in said} == {str(out)}, shown
    rows = [int(n.replace(",", "")) for _, n, _ in said]
    assert rows == sorted(rows) and rows[-1] <= 3000
    assert [int(p) for _, _, p in said] == [100 * n // 3000 for n in rows]
    assert len(out.read_text().splitlines()) == 3001


def test_no_status_line_when_stderr_is_not_a_terminal(tmp_path, libcudart):
    exe = build_workload("runtime_calls.c")
    proc = subprocess.run(cudaprobe_cmd("trace", "--lib", str(libcudart), "-o",
                                        str(tmp_path / "calls.jsonl"), "--", str(exe), "30"),
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    assert "Ctrl-C to stop" not in proc.stderr and "\x1b[" not in proc.stderr
    assert "300 calls in" in proc.stderr


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_table_on_a_terminal_fits_and_keeps_details_and_errors(libcudart, width):
    """`trace -- COMMAND` on a terminal of 80, 100 and 160 columns: the rows go
    to stderr, the command keeps stdout; each row is TIME, PROCESS, PID,
    EVENT and 30 cells of DETAILS at least, which read as a person reads a
    call: what went in first (the size, the kernel and its grid), the error
    said once (RESULT, or after DETAILS' arrow where RESULT is folded); the
    line saying the command exited comes after the last row."""
    exe = build_workload("runtime_calls.c")
    rc, shown, stdout = on_terminal(cudaprobe_cmd(
        "trace", "--lib", str(libcudart), "-e", "cudaMalloc,cudaMemcpy,cudaLaunchKernel", "--",
        str(exe), "3"), width)
    assert rc == 0, shown
    assert "cudaMalloc" in stdout and "TIME(ms)" not in stdout  # the command's own
    lines = shown.splitlines()
    assert all(len(line) <= width for line in lines), [line for line in lines
                                                        if len(line) > width]
    header = next(line for line in lines if line.startswith("  TIME(ms)"))
    assert header.split()[:3] == ["TIME(ms)", "PROCESS", "PID"] and "EVENT" in header
    details = header.rindex(" ") + 1
    assert width - details >= 30
    rows = [line for line in lines if re.match(r" +\d+\.\d{3} ", line)]
    mallocs = [line for line in rows if " cudaMalloc " in line]
    copies = [line for line in rows if " cudaMemcpy " in line]
    launches = [line for line in rows if " cudaLaunchKernel " in line]
    assert len(mallocs) == len(copies) == len(launches) == 3 and len(rows) == 9
    exited = next(i for i, line in enumerate(lines) if "exited (status 0)" in line)
    assert exited > lines.index(rows[-1])  # not between the header and the rows
    for row in rows:
        assert row.count("nsuffici") == 1  # said once
    malloc, copy, launch = mallocs[0][details:], copies[0][details:], launches[0][details:]
    assert malloc.startswith("size=1.0 MiB") and "devPtr" not in malloc  # (never written)
    assert copy.startswith("count=4.0 KiB")
    # the kernel first: its name (or, where the program exited before it was
    # named, which the naming tests see to, its stub's address), then its grid
    kernel = launch.split(" ", 1)[0].rstrip("…")
    assert kernel == "fake_kernel" or kernel.startswith("func=0x"), launch
    if width == 80:  # RESULT folded: the error's short name after the arrow
        assert malloc == "size=1.0 MiB → InsufficientDriver"
        assert "→ Insuffici" in launch
    elif width == 100:
        assert "Insufficien…" in mallocs[0]  # RESULT, less its prefix
        assert launch.startswith(kernel + " gridDim=(")
    else:
        assert "cudaErrorInsufficientDriver" in mallocs[0] and malloc == "size=1.0 MiB"
        assert launch.startswith(kernel + " gridDim=(4,2,1) blockDim=(")


@pytest.mark.parametrize("width", [80, 100, 160])
def test_python_lines_in_wide_characters_keep_each_row_on_its_line(tmp_path, libcudart, width):
    """--py-stacks on a terminal: the PYTHON column holds a file named in CJK
    (two cells a character) cut at its start to the column's cells, so no
    row wraps; at 80 columns the size still shows."""
    folder = tmp_path / "データ"
    folder.mkdir()
    script = folder / "学習スクリプト.py"
    script.write_text(f"import ctypes\nrt = ctypes.CDLL({str(libcudart)!r})\n"
                      "p = ctypes.c_void_p()\n"
                      "for i in range(3):\n"
                      "    rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(1 << 20))\n")
    rc, shown, _ = on_terminal(cudaprobe_cmd("trace", "--py-stacks", "--lib", str(libcudart),
                                             "-e", "cudaMalloc", "--", "/usr/bin/python3",
                                             str(script)), width)
    assert rc == 0, shown
    lines = shown.splitlines()
    assert all(cell_len(line) <= width for line in lines), [
        line for line in lines if cell_len(line) > width]
    rows = [line for line in lines if " cudaMalloc " in line and "│" not in line]
    assert len(rows) == 3, shown
    for row in rows:
        assert "スクリプト.py:5 " in row and "size=1.0 MiB" in row
    header = next(line for line in lines if line.startswith("  TIME(ms)"))
    assert "PYTHON" in header and ("PROCESS" in header) == (width > 80)


@pytest.mark.parametrize("width", [80, 100, 160])
def test_stats_on_a_terminal_keeps_names_whole_and_rows_on_one_line(libcudart, width):
    """stats' EVENT is never cut where the terminal has room for it: the
    columns a narrow terminal cannot hold are left out, and said."""
    exe = build_workload("runtime_calls.c")
    rc, shown, _ = on_terminal(cudaprobe_cmd("stats", "--lib", str(libcudart), "--", "sh",
                                             "-c", f"{exe} 2 >/dev/null"), width, stdout=None)
    assert rc == 0, shown
    lines = shown.splitlines()
    assert all(cell_len(line) <= width for line in lines)
    rows = [line for line in lines if "│" in line]
    names = [line.split()[0] for line in rows]
    assert names and all(name.startswith("cuda") and "…" not in name for name in names), names
    assert "cudaEventElapsedTime" in names and "cudaGetDeviceCount" in names
    assert len(names) == len(set(names))  # one line a row: none wrapped
    if width == 80:
        assert any("left out at this width" in line for line in lines)
