"""Shared fixtures: repo paths, the real CUDA libraries, workloads built on demand."""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

# No per-example deadline: on a loaded machine (2 cores, several suites at once) a
# slow example failed as DeadlineExceeded, a timing assert; timings live in benchmarks.
settings.register_profile("cudaprobe", deadline=None)
settings.load_profile("cudaprobe")

# How long a test waits for anything (a process to exit, a line to appear)
# before calling it a hang: a guard, never a speed expectation. Every wait is
# for an event, so a passing test never waits this long, and a loaded machine
# (2 cores, several suites at once) is far from reaching it.
HANG_S = 600

def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked `slow` (tens of seconds to minutes) first: scripts/test runs
    the files on pytest-xdist workers, a file to a worker, in this order, and
    the long ones started first end with the rest rather than after them."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


REPO = Path(__file__).resolve().parent.parent
WORKLOADS = REPO / "tests" / "workloads"
WORKLOAD_BIN = WORKLOADS / "bin"
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
NVCC = CUDA_HOME / "bin" / "nvcc"
# the nvidia-nccl-cu13 wheel, unpacked by scripts/setup
NCCL_HOME = REPO / ".deps" / "nccl" / "nvidia" / "nccl"


def libcudart_path() -> Path | None:
    for p in sorted((CUDA_HOME / "lib64").glob("libcudart.so.*")):
        return p.resolve()
    return None


def libcuda_path() -> Path | None:
    """Debian's libcuda1 extracted by scripts/setup (see .deps/libcuda.path)."""
    marker = REPO / ".deps" / "libcuda.path"
    if marker.is_file():
        p = Path(marker.read_text().strip())
        if p.exists():
            return p
    return None


@pytest.fixture(scope="session")
def libcudart() -> Path:
    p = libcudart_path()
    if p is None:
        pytest.skip(f"no libcudart.so.* under {CUDA_HOME}/lib64 (CUDA toolkit missing)")
    return p


@pytest.fixture(scope="session")
def libcuda() -> Path:
    p = libcuda_path()
    if p is None:
        pytest.skip("libcuda not extracted: run scripts/setup")
    return p


@pytest.fixture(scope="session")
def libnccl() -> Path:
    p = NCCL_HOME / "lib" / "libnccl.so.2"
    if not p.is_file():
        pytest.skip("libnccl not unpacked: run scripts/setup")
    return p


def build_once(out: Path, inputs: list[Path], command: Callable[[Path], list[str]]) -> Path:
    """`out` built by `command(path)` unless it is newer than every input.

    Several suites (or pytest-xdist workers) may ask at once: the build runs
    under a lock on a file beside `out`, into a temporary name renamed over
    `out`, so that nobody runs a half-written program and a program running
    the old file keeps it.
    """
    def fresh() -> bool:
        return out.exists() and out.stat().st_mtime >= max(p.stat().st_mtime for p in inputs)

    if fresh():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not fresh():
            tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
            try:
                subprocess.run(command(tmp), check=True, capture_output=True, text=True)
                os.replace(tmp, out)
            finally:
                tmp.unlink(missing_ok=True)
    return out


def build_workload(source: str, out_name: str | None = None,
                   extra: list[str] | None = None) -> Path:
    """Compile tests/workloads/SOURCE into tests/workloads/bin (cached by mtime).

    .c files build with gcc against the shared libcudart; .cu files with nvcc
    (add ["-cudart=shared"] in `extra` for the shared runtime). `out_name` may
    name a subdirectory of bin (a library that must keep its soname as file name).
    """
    src = WORKLOADS / source
    extra = extra or []
    out = WORKLOAD_BIN / (out_name or src.stem)
    inputs = [src, *local_includes(src)]
    lib64 = str(CUDA_HOME / "lib64")
    if src.suffix == ".c":
        return build_once(out, inputs, lambda to: [
            "gcc", "-O1", "-g", f"-I{CUDA_HOME}/include", "-o", str(to), str(src),
            f"-L{lib64}", "-lcudart", "-lpthread", f"-Wl,-rpath,{lib64}", "-ldl", *extra])
    if not NVCC.exists():
        pytest.skip(f"nvcc not found at {NVCC}")
    return build_once(out, inputs, lambda to: [str(NVCC), "-O1", "-g", "-o", str(to), str(src),
                                               *extra])


def local_includes(src: Path) -> list[Path]:
    """The files a source names with `#include "..."` (the library's inject.h):
    a change to one builds the program again."""
    names = re.findall(r'^\s*#\s*include\s+"([^"]+)"', src.read_text(), re.MULTILINE)
    return [p for p in (src.parent / n for n in names) if p.exists()]


def unique_name(prefix: str) -> str:
    """A process name (comm: 15 characters) no other run of the suite uses, for
    tests that select processes by name while another suite may run beside."""
    return f"{prefix}{secrets.token_hex(5)}"


def ignored_by_runner() -> int:
    """SigIgn bits a command started from this test runner inherits: what the
    runner's own parent ignored (nohup ignores SIGHUP, a background job of a
    non-interactive shell SIGINT and SIGQUIT), less SIGPIPE and SIGXFSZ, which
    the interpreter ignores itself and a command gets back at their default."""
    status = Path("/proc/self/status").read_text()
    ignored = int(next(line for line in status.splitlines()
                       if line.startswith("SigIgn:")).split()[1], 16)
    return ignored & ~(1 << (signal.SIGPIPE - 1)) & ~(1 << (signal.SIGXFSZ - 1))


def cudaprobe_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "cudaprobe", *args]


# uid and gid of `nobody`, whom the tests become to run a command as a user who is not root
NOBODY = 65534


def as_not_root(argv: list[str]) -> list[str]:
    """`argv` to be run by a user who is not root: as `nobody` (through setpriv)
    where the tests run as root, as it is where they do not, so that a test of
    what such a user is told runs in both places."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is needed to run a command as nobody")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]


def not_root_uid() -> int:
    """The uid that as_not_root's commands run as."""
    return NOBODY if os.geteuid() == 0 else os.geteuid()


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A directory for bad input (tests/badinput.py): an existing output file, a
    non-ELF 'library', an aarch64 ELF, a truncated one, a FIFO, an empty
    directory, a symlink, two symlinks in a loop and a non-executable file."""
    (tmp_path / "exists.jsonl").write_text("keep me\n")
    (tmp_path / "libcudart.so.12").write_text("not ELF\n")
    arm = tmp_path / "arm" / "libcudart.so.12"
    arm.parent.mkdir()
    data = bytearray(Path("/bin/true").read_bytes())
    data[18:20] = (183).to_bytes(2, "little")  # e_machine = EM_AARCH64
    arm.write_bytes(data)
    (tmp_path / "empty").mkdir()
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "exists.jsonl")
    (tmp_path / "script").write_text("#!/bin/sh\n")
    cut = tmp_path / "cut" / "libcudart.so.12"  # its ELF header whole, its sections gone
    cut.parent.mkdir()
    cut.write_bytes(Path("/bin/true").read_bytes()[:3000])
    os.mkfifo(tmp_path / "fifo.so")  # open() would wait for a writer for good
    (tmp_path / "loop.so").symlink_to("loop2.so")  # links that lead to each other
    (tmp_path / "loop2.so").symlink_to("loop.so")
    return tmp_path
