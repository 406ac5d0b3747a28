"""Compile a small C program against bpf/ and read the `name value` lines it prints:
how the tests compare the BPF headers with their Python mirrors."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cudaprobe.probe.bpfprog import bpf_dir


def c_values(directory: Path, source: str) -> dict[str, int]:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    (directory / "probe.c").write_text(source)
    subprocess.run([cc, f"-I{bpf_dir()}", "-o", str(directory / "probe"),
                    str(directory / "probe.c")], check=True, capture_output=True)
    out = subprocess.run([str(directory / "probe")], check=True, capture_output=True,
                         text=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}
