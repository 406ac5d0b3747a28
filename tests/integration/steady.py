"""`cudaprobe trace -o FILE ARGS -- steady_calls LOOPS 0 0`, as several of these
test files run it, and the summary trailer it leaves."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ..conftest import HANG_S, build_workload, cudaprobe_cmd


def steady_trace_argv(out: Path, libcudart: Path, loops: int, *args: str) -> list[str]:
    """LOOPS loops of 3 calls, as fast as it can (0 loops: until stopped)."""
    exe = build_workload("steady_calls.c")
    return cudaprobe_cmd("trace", "--lib", str(libcudart), "-o", str(out), *args, "--",
                         str(exe), str(loops), "0", "0")


def trace_steady(tmp_path: Path, libcudart: Path, loops: int, *args: str,
                 output: str = "calls.jsonl",
                 umask: int | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / output
    proc = subprocess.run(steady_trace_argv(out, libcudart, loops, *args), capture_output=True,
                          text=True, timeout=HANG_S,
                          preexec_fn=None if umask is None else (lambda: os.umask(umask)))
    return proc, out


def trailer(out: Path) -> dict:
    """The JSONL output's `{"summary": ...}` line."""
    return json.loads(out.read_text().splitlines()[-1])["summary"]
