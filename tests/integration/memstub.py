"""The memstub libraries (tests/workloads/memstub_*.c): a libcudart.so.13 and a
libcuda.so.1 whose allocations succeed without a GPU, for what the real
library cannot show here: memory that is allocated, freed, leaked."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ..conftest import CUDA_HOME, WORKLOAD_BIN, WORKLOADS

STUB_DIR = WORKLOAD_BIN / "memstub"


def build_memstub() -> Path:
    """Build bin/memstub/{libcuda.so.1,libcudart.so.13} (cached by mtime); returns the dir."""
    cuda, cudart = STUB_DIR / "libcuda.so.1", STUB_DIR / "libcudart.so.13"
    sources = [WORKLOADS / n for n in ("memstub_cuda.c", "memstub_cudart.c",
                                       "memstub_cudart.map")]
    newest = max(s.stat().st_mtime for s in sources)
    if all(p.exists() and p.stat().st_mtime >= newest for p in (cuda, cudart)):
        return STUB_DIR
    STUB_DIR.mkdir(parents=True, exist_ok=True)
    # with frame pointers, each function begins with push %rbp, as libcudart's do:
    # the kernel's stack walk from their entry then starts with the return address
    cc = ["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-shared", "-fPIC",
          f"-I{CUDA_HOME}/include"]
    subprocess.run([*cc, "-Wl,-soname,libcuda.so.1", "-o", str(cuda), str(sources[0])],
                   check=True, capture_output=True, text=True)
    subprocess.run([*cc, "-Wl,-soname,libcudart.so.13", f"-Wl,--version-script={sources[2]}",
                    "-o", str(cudart), str(sources[1]), f"-L{STUB_DIR}", "-l:libcuda.so.1",
                    "-Wl,-rpath,$ORIGIN"], check=True, capture_output=True, text=True)
    return STUB_DIR


def stub_env() -> dict[str, str]:
    """The environment for cudaprobe, and so for its -- COMMAND: the stubs come first."""
    return {**os.environ, "LD_LIBRARY_PATH": str(build_memstub())}
