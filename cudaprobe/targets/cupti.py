"""The GPU-time library (cupti/gputime.c) and what `-- COMMAND` needs to load it.

The library is built from the toolkit's CUPTI headers, by scripts/setup or
on first use, into a cache keyed by its source (CUDAPROBE_CACHE, else
/var/cache/cudaprobe as root, else $XDG_CACHE_HOME/cudaprobe or
~/.cache/cudaprobe), so that a changed source is rebuilt and two versions of
cudaprobe do not share one. It needs only the headers to build: libcupti is
dlopen'ed by the library in the program, from the path found here
(CUDAPROBE_CUPTI), so a machine without CUPTI still runs the program, untimed.

The library is loaded into the processes traced, as root where cudaprobe
runs as root: the cache is used only where root alone (or, not root, we
alone) can write (targets/cachedir.py), the library found there is loaded
only if it is a regular file no one else can write whose bytes have the
digest written beside it (`.sha256`) when it was built (else it is built
again in its place: cut short, another build's, a link), and, as root, it is
built by /usr/bin/cc in a clean environment from headers no one else can
write (CC, PATH and CUDA_HOME under `sudo -E` are the invoking user's).

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

from cudaprobe.targets.cachedir import (
    cache_root,
    open_trusted,
    trusted_dir,
    unsafe_path,
    write_new,
)

SOURCE = "gputime.c"
HEADER = "gputime.h"
# the library is built from these together (attach.c and the stub: --pid --gpu-time)
SOURCES = (SOURCE, "attach.c", "inject_stub.S")
HEADERS = (HEADER, "inject.h")
INJECTION_VAR = "CUDA_INJECTION64_PATH"
DIR_VAR = "CUDAPROBE_GPUTIME_DIR"
CUPTI_VAR = "CUDAPROBE_CUPTI"
CACHE_VAR = "CUDAPROBE_CACHE"
ROOT_CC = "/usr/bin/cc"  # as root: never a compiler the environment names
ROOT_BUILD_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


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
    return cache_root(CACHE_VAR)


def compiler() -> tuple[list[str], dict[str, str] | None]:
    """(the C compiler, the environment it runs in: None for ours). As root,
    /usr/bin/cc with only a fixed PATH: gcc takes its helpers and headers
    from variables too (COMPILER_PATH, CPATH)."""
    if os.geteuid() == 0:
        return [ROOT_CC], dict(ROOT_BUILD_ENV)
    return [os.environ.get("CC") or "cc"], None


def cupti_library() -> str:
    """The libcupti the library is to load: CUDAPROBE_CUPTI, else the toolkit's;
    as root, only one no one else can change (it is loaded into the program)."""
    given = os.environ.get(CUPTI_VAR)
    if given and not (os.geteuid() == 0 and unsafe_path(Path(given))):
        return given
    return str(find_libcupti() or "")


def find_libcupti() -> Path | None:
    """libcupti of the toolkit: lib64, the targets tree or extras/CUPTI."""
    home = cuda_home()
    for d in (home / "lib64", home / "targets" / "x86_64-linux" / "lib",
              home / "extras" / "CUPTI" / "lib64"):
        for name in ("libcupti.so", *sorted(p.name for p in d.glob("libcupti.so.*"))):
            # as root, one no one else can change: the library loads it into the program
            if (d / name).exists() and not (os.geteuid() == 0 and unsafe_path(d / name)):
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
    untrusted = unsafe_path(include) if os.geteuid() == 0 else ""
    if untrusted:  # its headers would be compiled into what root injects
        return None, f"the CUDA headers are not root's alone ({untrusted}): not built"
    return cache_dir() / library_name(src), ""


def library_name(src: Path) -> str:
    """The library's file name: a digest of the sources it is built from."""
    digest = hashlib.sha256(b"".join((src / name).read_bytes() for name in SOURCES + HEADERS))
    return f"gputime-{digest.hexdigest()[:16]}.so"


# beside the sources, where an image ships the library built with them
# (scripts/build-image: the image has no CUDA headers and a read-only root)
PREBUILT = "prebuilt"


def shipped_library() -> Path | None:
    """The library built with these sources when they were installed, intact
    (as the cache's is checked), or None."""
    src = cupti_source_dir()
    if src is None:
        return None
    path = src / PREBUILT / library_name(src)
    return path if cached_library_intact(path) else None


def build_library() -> tuple[Path | None, str]:
    """(the library, "") shipped, or built or found in the cache, or (None, why not)."""
    shipped = shipped_library()
    if shipped is not None:
        return shipped, ""
    out, why = library_path()
    if out is None:
        return None, why
    directory, why = trusted_dir(out.parent)
    if directory is None:
        return None, f"the cache is not cudaprobe's alone ({why}): not used"
    out = directory / out.name
    if cached_library_intact(out):
        return out, ""
    return _build_in(directory, out)


def build_shipped(package: Path) -> tuple[Path | None, str]:
    """For an image (scripts/build-image): the library built with this
    checkout's toolkit headers into `package`'s cupti/prebuilt/ (an installed
    cudaprobe package, its sources the same as ours), where
    shipped_library() finds it."""
    out, why = library_path()
    if out is None:
        return None, why
    directory = package / "cupti" / PREBUILT
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    return _build_in(directory, directory / out.name)


def _build_in(directory: Path, out: Path) -> tuple[Path | None, str]:
    """The library compiled into `out`, in the trusted `directory`, its digest
    beside it; or (None, why not)."""
    try:
        # a new name made with O_EXCL, renamed into place when built: a second
        # cudaprobe building at once finds one or the other, never half of one.
        # Whatever was there (a link, a FIFO, another build's bytes) is replaced,
        # never followed or loaded
        write_new(directory, out.name, _compile, mode=0o755)
        digest = _digest_of(out)
        if digest is None:
            raise OSError(0, f"{out.name} is gone")
        write_new(directory, out.name + DIGEST_SUFFIX,
                  lambda fd, _tmp: os.write(fd, digest.encode() + b"\n"), mode=0o644)
    except BuildFailed as e:
        return None, f"cannot build {SOURCE}: {e}"
    except OSError as e:
        return None, f"cannot write to {directory}: {e.strerror}"
    return out, ""


DIGEST_SUFFIX = ".sha256"  # beside the library: the digest of the bytes built


def cached_library_intact(path: Path) -> bool:
    """Whether `path` in a trusted cache is the library as it was built: a
    regular file no one else can write (never followed), whose bytes have the
    digest written beside it when it was built. Else (missing, cut short, from
    another build, not a plain file of ours) it is built again."""
    kept = _read_trusted(path.with_name(path.name + DIGEST_SUFFIX), 128)
    return kept is not None and kept.decode("ascii", "replace").strip() == _digest_of(path)


def _digest_of(path: Path) -> str | None:
    fd, _ = open_trusted(path)
    if fd is None:
        return None
    try:
        digest = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def _read_trusted(path: Path, limit: int) -> bytes | None:
    fd, _ = open_trusted(path)
    if fd is None:
        return None
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


class BuildFailed(Exception):
    pass


def _compile(_fd: int, tmp: str) -> None:
    src, include = cupti_source_dir(), cuda_home() / "include"
    cc, env = compiler()
    cmd = [*cc, "-O2", "-shared", "-fPIC", "-o", tmp, *(str(src / name) for name in SOURCES),
           f"-I{src}", f"-I{include}", "-ldl", "-lpthread"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildFailed(str(e)) from None
    if done.returncode != 0:
        raise BuildFailed((done.stderr.strip().splitlines() or ["?"])[0])


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
    # command that switches to another user cannot write there either: no GPU time.
    # As root, made only where no one else can move it away ($TMPDIR under sudo -E
    # is the user's): what is in it is read, and removed at the end
    parent = tempfile.gettempdir()
    untrusted = unsafe_path(Path(parent), sticky_ok=True) if os.geteuid() == 0 else ""
    if untrusted:
        return GpuTimeSetup(why=f"the temporary directory is not root's alone ({untrusted})")
    directory = Path(tempfile.mkdtemp(prefix="cudaprobe-gputime-", dir=parent))
    env = {INJECTION_VAR: str(lib), DIR_VAR: str(directory)}
    cupti = cupti_library()
    if cupti:
        env[CUPTI_VAR] = cupti
    return GpuTimeSetup(env=env, directory=directory)


if __name__ == "__main__":  # scripts/setup: build it into the cache now, say what was done
    cached, _ = library_path()
    if cached is None or not cached_library_intact(cached):
        built, reason = build_library()
        print(f"built the --gpu-time library {built}" if built else
              f"not built: the --gpu-time library: {reason}")
