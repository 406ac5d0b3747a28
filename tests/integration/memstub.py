"""The memstub libraries (tests/workloads/memstub_*.c): a libcudart.so.13 and a
libcuda.so.1 whose allocations succeed without a GPU, for what the real
library cannot show here: memory that is allocated, freed, leaked."""

from __future__ import annotations

import os
from pathlib import Path

from ..conftest import CUDA_HOME, WORKLOAD_BIN, WORKLOADS, build_once

STUB_DIR = WORKLOAD_BIN / "memstub"


def build_memstub() -> Path:
    """Build bin/memstub/{libcuda.so.1,libcudart.so.13} (cached by mtime); returns the dir."""
    sources = [WORKLOADS / n for n in ("memstub_cuda.c", "memstub_cudart.c",
                                       "memstub_cudart.map")]
    # with frame pointers, each function begins with push %rbp, as libcudart's do:
    # the kernel's stack walk from their entry then starts with the return address
    cc = ["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-shared", "-fPIC",
          f"-I{CUDA_HOME}/include"]
    cuda = build_once(STUB_DIR / "libcuda.so.1", sources[:1], lambda to: [
        *cc, "-Wl,-soname,libcuda.so.1", "-o", str(to), str(sources[0])])
    build_once(STUB_DIR / "libcudart.so.13", [*sources, cuda], lambda to: [
        *cc, "-Wl,-soname,libcudart.so.13", f"-Wl,--version-script={sources[2]}",
        "-o", str(to), str(sources[1]), f"-L{STUB_DIR}", "-l:libcuda.so.1", "-Wl,-rpath,$ORIGIN"])
    return STUB_DIR


def stub_env() -> dict[str, str]:
    """The environment for cudaprobe, and so for its -- COMMAND: the stubs come first."""
    return {**os.environ, "LD_LIBRARY_PATH": str(build_memstub())}
