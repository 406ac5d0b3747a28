"""The memstub libraries (tests/workloads/memstub_*.c): a libcudart.so.13 and a
libcuda.so.1 whose allocations succeed without a GPU, for what the real
library cannot show here: memory that is allocated, freed, leaked."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..conftest import CUDA_HOME, WORKLOAD_BIN, WORKLOADS, build_once

STUB_DIR = WORKLOAD_BIN / "memstub"
# with frame pointers, each function begins with push %rbp, as libcudart's do:
# the kernel's stack walk from their entry then starts with the return address
STUB_CC = ["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-shared", "-fPIC",
           f"-I{CUDA_HOME}/include"]
RUNTIME_VERSIONS = WORKLOADS / "memstub_cudart.map"


def build_stub_runtime(directory: Path, sources: Sequence[Path], link: Sequence[Path] = (),
                       link_args: Sequence[str] = ()) -> Path:
    """DIRECTORY/libcudart.so.13 from `sources`, exported under the real
    runtime's version node (so that programs linked against the toolkit's run
    on it), linked with the libraries `link` and `link_args` (cached by mtime)."""
    return build_once(directory / "libcudart.so.13", [*sources, RUNTIME_VERSIONS, *link],
                      lambda to: [*STUB_CC, "-Wl,-soname,libcudart.so.13",
                                  f"-Wl,--version-script={RUNTIME_VERSIONS}", "-o", str(to),
                                  *map(str, sources), *link_args])


def build_memstub() -> Path:
    """Build bin/memstub/{libcuda.so.1,libcudart.so.13} (cached by mtime); returns the dir."""
    source = WORKLOADS / "memstub_cuda.c"
    cuda = build_once(STUB_DIR / "libcuda.so.1", [source], lambda to: [
        *STUB_CC, "-Wl,-soname,libcuda.so.1", "-o", str(to), str(source)])
    build_stub_runtime(STUB_DIR, [WORKLOADS / "memstub_cudart.c"], [cuda],
                       [f"-L{STUB_DIR}", "-l:libcuda.so.1", "-Wl,-rpath,$ORIGIN"])
    return STUB_DIR


def stub_env() -> dict[str, str]:
    """The environment for cudaprobe, and so for its -- COMMAND: the stubs come first."""
    return {**os.environ, "LD_LIBRARY_PATH": str(build_memstub())}
