"""What the fleet tests run on a machine without a GPU: fleet_node.c (a GPU
node's calls, in rounds its test drives) on the memstub libraries, whose
libcudart.so.13 is built here with fleet_copies.c in it, so that copies and
launches succeed as on a GPU."""

from __future__ import annotations

import os
from pathlib import Path

from ..conftest import WORKLOAD_BIN, WORKLOADS, build_workload
from .memstub import build_memstub, build_stub_runtime

STUB_DIR = WORKLOAD_BIN / "fleetstub"


def build_fleet_stub() -> Path:
    """bin/fleetstub/libcudart.so.13: memstub's runtime and fleet_copies.c, over
    memstub's libcuda.so.1 (cached by mtime); returns the dir."""
    memstub = build_memstub()
    build_stub_runtime(STUB_DIR, [WORKLOADS / "memstub_cudart.c", WORKLOADS / "fleet_copies.c"],
                       [memstub / "libcuda.so.1"],
                       [f"-L{memstub}", "-l:libcuda.so.1", f"-Wl,-rpath,{memstub}"])
    return STUB_DIR


def fleet_node() -> Path:
    return build_workload("fleet_node.c")


def fleet_libs() -> list[str]:
    """--lib arguments for what fleet_node calls: the stub runtime and driver."""
    return ["--lib", str(build_fleet_stub() / "libcudart.so.13"),
            "--lib", str(build_memstub() / "libcuda.so.1")]


def fleet_env() -> dict[str, str]:
    """The stubs first, for fleet_node and for programs built against the toolkit."""
    return {**os.environ, "LD_LIBRARY_PATH": f"{build_fleet_stub()}:{build_memstub()}"}
