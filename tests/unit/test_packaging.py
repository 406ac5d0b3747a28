"""A non-editable install ships bpf/ and cupti/ as package data and finds them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ..conftest import HANG_S, REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    p = subprocess.run(["bash", str(REPO / "scripts" / "wheel"), str(out)], capture_output=True,
                       text=True, timeout=HANG_S)
    assert p.returncode == 0, p.stderr[-2000:]
    return next(out.glob("cudaprobe-*.whl"))


def test_wheel_contains_bpf_sources_and_entry_point(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for name in ("trace.bpf.c", "stats.bpf.c", "pairing.bpf.h", "cudaprobe.h"):
        assert f"cudaprobe/bpf/{name}" in names
    assert "cudaprobe/cupti/gputime.c" in names and "cudaprobe/cupti/gputime.h" in names
    # every subpackage is listed in setup.cfg, so shipped
    for init in sorted((REPO / "cudaprobe").glob("*/__init__.py")):
        assert f"cudaprobe/{init.parent.name}/__init__.py" in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "cudaprobe = cudaprobe.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_installed_package_finds_its_bpf_dir(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, timeout=HANG_S)
    code = ("import cudaprobe.probe.bpfprog as b, cudaprobe.targets.cupti as c; "
            "print(b.bpf_dir()); print(c.cupti_source_dir())")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(target / "cudaprobe" / "bpf"),
                                str(target / "cudaprobe" / "cupti")]
