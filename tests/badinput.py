"""Running the real `cudaprobe` on bad input, in a scratch directory (the
`scratch` fixture) whose contents must be the same afterwards: one line on
stderr, exit 2, no traceback.

Used by tests/unit/test_bad_input.py (what any user is told) and
tests/integration/test_bad_input.py (what needs root to be reached).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .conftest import HANG_S, as_not_root, cudaprobe_cmd, libcudart_path

LIB = str(libcudart_path() or "/usr/local/cuda/lib64/libcudart.so")


def snapshot(d: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() and not p.is_symlink()
                                    else None) for p in sorted(d.rglob("*"))}


def run(scratch: Path, *args: str, not_root: bool = False) -> subprocess.CompletedProcess:
    """`cudaprobe ARGS` in `scratch` (by a user who is not root, with `not_root`),
    which must write nothing there."""
    before = snapshot(scratch)
    argv = as_not_root(cudaprobe_cmd(*args)) if not_root else cudaprobe_cmd(*args)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_S, cwd=scratch)
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
