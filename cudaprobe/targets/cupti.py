"""The GPU-time library (cupti/gputime.c) and what `-- COMMAND` needs to load it.

The library is built from the toolkit's CUPTI headers, by scripts/setup or
on first use, into a cache keyed by its source (CUDAPROBE_CACHE, else
$XDG_CACHE_HOME/cudaprobe, else ~/.cache/cudaprobe), so that a changed
source is rebuilt and two versions of cudaprobe do not share one. It needs
only the headers to build: libcupti is dlopen'ed by the library in the
program, from the path found here (CUDAPROBE_CUPTI), so a machine without
CUPTI still runs the program, untimed.

Nothing here raises: GPU time is an extra, and every reason not to have it
is one line (`GpuTimeSetup.why`) said by the caller, which goes on.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SOURCE = "gputime.c"
HEADER = "gputime.h"
# the library is built from these together (attach.c and the stub: --pid --gpu-time)
SOURCES = (SOURCE, "attach.c", "inject_stub.S")
HEADERS = (HEADER, "inject.h")
INJECTION_VAR = "CUDA_INJECTION64_PATH"
DIR_VAR = "CUDAPROBE_GPUTIME_DIR"
CUPTI_VAR = "CUDAPROBE_CUPTI"


def cupti_source_dir() -> Path | None:
    """cupti/ sources: shipped as package data, or the source tree's top-level cupti/."""
    package = Path(__file__).resolve().parent.parent  # cudaprobe/
    for candidate in (package / "cupti", package.parent / "cupti"):
        if (candidate / SOURCE).is_file():
            return candidate
    return None


def cuda_home() -> Path:
    return Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")


def cache_dir() -> Path:
    if os.environ.get("CUDAPROBE_CACHE"):
        return Path(os.environ["CUDAPROBE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cudaprobe"


def find_libcupti() -> Path | None:
    """libcupti of the toolkit: lib64, the targets tree or extras/CUPTI."""
    home = cuda_home()
    for d in (home / "lib64", home / "targets" / "x86_64-linux" / "lib",
              home / "extras" / "CUPTI" / "lib64"):
        for name in ("libcupti.so", *sorted(p.name for p in d.glob("libcupti.so.*"))):
            if (d / name).exists():
                return (d / name).resolve()
    return None


def library_path() -> tuple[Path | None, str]:
    """(where the library of this source is cached, ""), or (None, why it cannot be built)."""
    src = cupti_source_dir()
    if src is None:
        return None, f"{SOURCE} is not installed with cudaprobe"
    include = cuda_home() / "include"
    if not (include / "cupti.h").is_file():
        return None, f"no CUPTI headers ({include}/cupti.h): set CUDA_HOME to the CUDA toolkit"
    digest = hashlib.sha256(b"".join((src / name).read_bytes() for name in SOURCES + HEADERS))
    return cache_dir() / f"gputime-{digest.hexdigest()[:16]}.so", ""


def build_library() -> tuple[Path | None, str]:
    """(the library, "") built or found in the cache, or (None, why not)."""
    out, why = library_path()
    if out is None:
        return None, why
    if out.is_file():
        return out, ""
    src, include = cupti_source_dir(), cuda_home() / "include"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".gputime-", suffix=".so", dir=out.parent)
        os.close(fd)
    except OSError as e:
        return None, f"cannot write to {out.parent}: {e.strerror}"
    cmd = [os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", tmp,
           *(str(src / name) for name in SOURCES), f"-I{src}", f"-I{include}", "-ldl",
           "-lpthread"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        os.unlink(tmp)
        return None, f"cannot build {SOURCE}: {e}"
    if done.returncode != 0:
        os.unlink(tmp)
        first = (done.stderr.strip().splitlines() or ["?"])[0]
        return None, f"cannot build {SOURCE}: {first}"
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)  # atomic: a second cudaprobe building at once finds one or the other
    return out, ""


@dataclass
class GpuTimeSetup:
    """What --gpu-time does to `-- COMMAND`: the environment it adds, the
    directory the library writes into, or why there is no GPU time."""
    env: dict[str, str] = field(default_factory=dict)
    directory: Path | None = None
    why: str = ""  # not empty: no GPU time, for this reason (one line)

    def close(self) -> None:
        if self.directory is not None:
            for p in self.directory.iterdir():
                p.unlink()
            self.directory.rmdir()
            self.directory = None


def prepare(command_env: dict[bytes, bytes] | None) -> GpuTimeSetup:
    """The library built and a private directory made for its files; nothing
    of it when the command's environment already names an injection library
    (one per process: it is kept, and said)."""
    given = (command_env or {}).get(INJECTION_VAR.encode())
    if given:
        return GpuTimeSetup(why=f"the command's environment sets {INJECTION_VAR}="
                                f"{given.decode(errors='replace')} (one CUDA injection "
                                "library per process): kept, no GPU time")
    lib, why = build_library()
    if lib is None:
        return GpuTimeSetup(why=why)
    # private (0700, as mkdtemp makes it): no other user can put records there. A
    # command that switches to another user cannot write there either: no GPU time
    directory = Path(tempfile.mkdtemp(prefix="cudaprobe-gputime-"))
    env = {INJECTION_VAR: str(lib), DIR_VAR: str(directory)}
    cupti = find_libcupti()
    if cupti is not None:
        env[CUPTI_VAR] = str(cupti)
    return GpuTimeSetup(env=env, directory=directory)


if __name__ == "__main__":  # scripts/setup: build it into the cache now, say what was done
    cached, _ = library_path()
    if cached is None or not cached.is_file():
        built, reason = build_library()
        print(f"built the --gpu-time library {built}" if built else
              f"not built: the --gpu-time library: {reason}")
