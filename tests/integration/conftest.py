"""Integration tests attach real uprobes: they need root and bcc."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudaprobe.targets.libs import discover_libraries

from ..conftest import HANG_S, build_workload, cudaprobe_cmd
from .running import kill_left_running

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # the hook sees every collected item, tests/unit's too: mark only this folder's
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.root)


@pytest.fixture(autouse=True)
def _needs_root_and_bcc() -> None:
    if os.geteuid() != 0:
        pytest.skip("integration tests attach uprobes: run as root")
    try:
        import bcc  # noqa: F401, PLC0415
    except ImportError:
        pytest.skip("bcc is not importable (apt-get install python3-bpfcc)")


@pytest.fixture(autouse=True)
def _kill_what_the_test_left_running() -> Iterator[None]:
    yield
    kill_left_running()


def run_cudaprobe(*args: str, timeout: float = HANG_S, check: bool = False,
                  **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cudaprobe_cmd(*args), capture_output=True, text=True,
                          timeout=timeout, check=check, **kw)


def trace_jsonl(tmp_path: Path, *args: str, command: list[str] | None = None,
                timeout: float = HANG_S, env: dict[str, str] | None = None,
                ) -> tuple[list[dict], dict, subprocess.CompletedProcess]:
    """Run `cudaprobe trace -o calls.jsonl ARGS -- COMMAND`; returns (calls, summary, proc)."""
    out = tmp_path / "calls.jsonl"
    argv = ["trace", "-o", str(out), *args]
    if command:
        argv += ["--", *command]
    proc = run_cudaprobe(*argv, timeout=timeout, env=env)
    assert out.exists(), proc.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines and "summary" in lines[-1], proc.stderr
    return lines[:-1], lines[-1]["summary"], proc


def probed_for_pid(*mapped: str, apis: tuple[str, ...] = ("runtime", "driver", "nccl")
                   ) -> list[str]:
    """The libraries `--pid` probes, sorted: the files the process maps (`mapped`,
    none of them a file of the usual places) and the usual places of `apis`,
    for the children it starts later (docs/attach.md)."""
    return sorted({*mapped, *discover_libraries(set(apis))})


def expected_calls(stdout: str) -> list[dict]:
    """The JSON lines a workload printed about the calls it made."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def build_cuda_workload(source: str, libcuda: Path) -> Path:
    """A workload of tests/workloads linked against the driver library `libcuda`."""
    d = str(libcuda.parent)
    return build_workload(source, extra=[f"-L{d}", "-lcuda", f"-Wl,-rpath,{d}"])


@pytest.fixture(scope="module")
def fake_cupti(libcuda) -> Path:
    """A stand-in libcupti for --gpu-time injected into a process (no GPU here)."""
    return build_workload("fake_libcupti.c", "libcupti-fake.so", extra=["-shared", "-fPIC"])
