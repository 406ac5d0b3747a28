"""Finding the CUDA and NCCL libraries to probe.

`--lib` accepts a path, a directory holding CUDA libraries, or a soname
(`libcudart.so.13`, `libnccl.so.2`). Without `--lib`, the usual places are
searched: the ld.so cache, /usr/local/cuda*, $CUDA_HOME, and pip's
nvidia/*/lib wheels (PyTorch's libnccl is nvidia/nccl/lib/libnccl.so.2).
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

from cudaprobe.catalogue.functions import DRIVER, NCCL, RUNTIME
from cudaprobe.errors import LibraryNotFound
from cudaprobe.targets.elf import check_elf

# library file name stem -> api
LIBRARY_STEMS = {"libcudart.so": RUNTIME, "libcuda.so": DRIVER, "libnccl.so": NCCL}
_NAME_RE = re.compile(r"^(libcudart|libcuda|libnccl)\.so(\.\d+)*$")


def api_of(path: str) -> str | None:
    """Which API a library path provides, judged by its file name."""
    m = _NAME_RE.match(os.path.basename(path))
    return LIBRARY_STEMS.get(m.group(1) + ".so") if m else None


def _ldconfig_paths() -> list[str]:
    try:
        out = subprocess.run(
            ["ldconfig", "-p"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.rsplit("=>", 1)[1].strip() for line in out.splitlines() if "=>" in line]


def _search_dirs() -> list[str]:
    dirs: list[str] = []
    for home in [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]:
        if home:
            dirs += [os.path.join(home, "lib64"), os.path.join(home, "lib")]
    for root in sorted(glob.glob("/usr/local/cuda*")):
        dirs += [os.path.join(root, "lib64")]
        dirs += glob.glob(os.path.join(root, "targets", "*", "lib"))
    site_roots = set(sys.path) | set(
        glob.glob("/usr/lib/python3*/*-packages")
        + glob.glob("/usr/local/lib/python3*/*-packages")
        + glob.glob("/opt/*/.venv/lib/python3*/site-packages")
    )
    for root in sorted(site_roots):
        dirs += glob.glob(os.path.join(root, "nvidia", "*", "lib"))
    return dirs


def _cuda_libs_in(directory: str) -> list[str]:
    return sorted(
        os.path.join(directory, n) for n in os.listdir(directory) if api_of(n) is not None
    )


def _dedupe(paths: list[str]) -> list[str]:
    """Keep one path per real file, preferring the most specific name."""
    seen: dict[str, str] = {}
    for p in paths:
        real = os.path.realpath(p)
        if os.path.isfile(real) and api_of(real) is not None:
            seen.setdefault(real, p)
    return sorted(seen)


def discover_libraries(apis: set[str]) -> list[str]:
    """Default CUDA libraries for the selected APIs, one per real file."""
    candidates = [p for p in _ldconfig_paths() if api_of(p) in apis]
    for d in _search_dirs():
        if os.path.isdir(d):
            candidates += [p for p in _cuda_libs_in(d) if api_of(p) in apis]
    return _dedupe(candidates)


def resolve_lib_arg(arg: str) -> list[str]:
    """Turn one --lib value into library paths, or raise LibraryNotFound."""
    if not arg.strip():
        raise LibraryNotFound(arg, "empty: give a path, a directory or a soname")
    if os.path.isdir(arg):
        found = _dedupe(_cuda_libs_in(arg))
        if not found:
            raise LibraryNotFound(arg, "directory holds no libcudart.so*, libcuda.so* or "
                                       "libnccl.so*")
        return found
    if os.sep in arg or os.path.lexists(arg):  # a link to nowhere: check_elf says why
        check_elf(arg)
        return [os.path.realpath(arg)]
    # a soname or bare file name: look it up where the loader and pip would
    matches = [p for p in _ldconfig_paths() if os.path.basename(p) == arg]
    for d in _search_dirs():
        p = os.path.join(d, arg)
        if os.path.exists(p):
            matches.append(p)
    if not matches:
        raise LibraryNotFound(arg, "not a file, and no library of that name was found")
    return [os.path.realpath(matches[0])]
