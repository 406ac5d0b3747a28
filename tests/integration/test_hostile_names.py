"""Bytes a traced process controls reach the terminal escaped: a process
named with an escape sequence and a newline (its executable's file name)
gives one table row, and the lines that name it say it escaped, as strace
writes such bytes (`\\x1b`, `\\n`)."""

from __future__ import annotations

import shutil
import subprocess

from ..conftest import build_workload, cudaprobe_cmd

NAME = '\x1b[31m,"b\nc\\d'  # 12 characters: the whole comm


def test_a_process_name_with_escapes_is_one_escaped_row(tmp_path, libcudart):
    exe = tmp_path / NAME
    shutil.copy(build_workload("runtime_calls.c"), exe)
    proc = subprocess.run(cudaprobe_cmd("trace", "--lib", str(libcudart), "-e", "cudaMalloc",
                                        "--", str(exe), "2"),
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.decode()
    assert "\x1b" not in err and "c\\d" not in err.replace("c\\\\d", "")
    escaped = '\\x1b[31m,"b\\nc\\\\d'
    rows = [line for line in err.splitlines() if " cudaMalloc " in line and "devPtr=" in line]
    # PROCESS is 15 characters: the escaped name is cut there (in the middle), on its line
    shown = escaped[:7] + "…" + escaped[-7:]
    assert len(rows) == 2 and all(f" {shown} " in row for row in rows), err
    # the name in cudaprobe's own lines (the command's path), escaped too
    assert f"{escaped} exited (status 0)" in err
