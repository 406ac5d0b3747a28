"""The diagnoses' patches of the GPU-time library (scripts/gpu/: the
quarantine of CUPTI's buffers, the variants check-cupti-toggle.sh builds)
still apply to this checkout's cupti/gputime.c, and the variants compile:
a patch gone stale would be found only on the GPU machine, whose time is
short."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VARIANTS = sorted((REPO / "scripts" / "gpu" / "cupti-variants").glob("*.patch"))


def applied(tmp_path: Path, patch: Path) -> Path:
    """A copy of cupti/ with `patch` (paths under cupti/) applied."""
    copy = tmp_path / "cupti"
    shutil.copytree(REPO / "cupti", copy, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(["git", "apply", "-p2", str(patch)], cwd=copy,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return copy


def test_the_quarantine_patch_applies(tmp_path):
    copy = applied(tmp_path, REPO / "scripts" / "gpu" / "quarantine.patch")
    assert copy.joinpath("gputime.c").read_bytes() != (REPO / "cupti" / "gputime.c").read_bytes()


@pytest.mark.parametrize("patch", VARIANTS, ids=lambda p: p.stem)
def test_each_variant_applies_and_compiles(tmp_path, patch):
    if not Path("/usr/local/cuda/include/cupti.h").exists():
        pytest.skip("no CUDA toolkit headers")
    copy = applied(tmp_path, patch)
    done = subprocess.run(
        ["gcc", "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(tmp_path / "lib.so"),
         str(copy / "gputime.c"), str(copy / "attach.c"), str(copy / "inject_stub.S"),
         f"-I{copy}", "-I/usr/local/cuda/include", "-ldl", "-lpthread"],
        capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_there_are_variants():
    assert {p.stem for p in VARIANTS} >= {"callbacks-switched", "per-thread-off",
                                          "no-flush-period"}
