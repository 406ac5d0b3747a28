"""cudaprobe's caches on disk (the --gpu-time library, symbol tables), kept
only where no one but the user cudaprobe runs as can write.

What is in a cache is used later without being checked again as closely:
the library is injected into the processes traced, the symbol tables name
their kernels. Run as root (often with `sudo -E`, which keeps the invoking
user's HOME and XDG_CACHE_HOME), a cache another user can write would let
that user choose code that root loads into other people's processes. So, as
root, the cache is /var/cache/cudaprobe, never under HOME; the user's
~/.cache/cudaprobe only when not root. A directory given in the environment
(`CUDAPROBE_CACHE`, `CUDAPROBE_CACHE_DIR`) is used as given, if it passes
the same check.

The check: the directory, and every directory on the way to it (symbolic
links followed one by one, each link in a directory that passed), is owned
by root or by us and writable by neither group nor others; a directory on
the way may be world-writable if it is sticky and root's (/tmp), since then
no one else can rename or remove what is in it. Files in the cache are
opened with O_NOFOLLOW and checked in the same way; they are written to a
new name made with O_EXCL (mkstemp) in the cache, then renamed into place.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

SYSTEM_CACHE = Path("/var/cache/cudaprobe")
MAX_LINKS = 40  # as the kernel's own limit on symbolic links in a path


def cache_root(variable: str) -> Path:
    """Where cudaprobe's caches live: `variable` if set; else, as root,
    /var/cache/cudaprobe; else $XDG_CACHE_HOME/cudaprobe or ~/.cache/cudaprobe."""
    given = os.environ.get(variable)
    if given:
        return Path(given)
    if os.geteuid() == 0:
        return SYSTEM_CACHE
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "cudaprobe"


def _owners() -> tuple[int, ...]:
    return (0,) if os.geteuid() == 0 else (0, os.geteuid())


def unsafe_owner(uid: int, mode: int, sticky_ok: bool = False) -> str:
    """Why a file or directory of this owner and mode may be changed by someone
    other than root or us; "" if it may not."""
    if uid not in _owners():
        return f"owned by uid {uid}"
    if mode & 0o022:
        if sticky_ok and stat.S_ISDIR(mode) and mode & stat.S_ISVTX and uid == 0:
            return ""
        return "writable by " + ("others" if mode & 0o002 else "its group")
    return ""


def unsafe_entry(st: os.stat_result, sticky_ok: bool = False) -> str:
    return unsafe_owner(st.st_uid, st.st_mode, sticky_ok)


def unsafe_path(path: Path, sticky_ok: bool = False) -> str:
    """Why someone other than root or us could change what `path` names (a
    directory on the way, a link, or the entry itself); "" if no one can.
    `sticky_ok`: `path` may be a sticky directory of root's (/tmp), where
    what we make is ours alone."""
    parts = list(Path(os.path.abspath(path)).parts[1:])
    current, links = "/", 0
    why = unsafe_entry(os.stat("/"), sticky_ok=True)
    if why:
        return f"/ is {why}"
    while parts:
        name = parts.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        step = os.path.join(current, name)
        try:
            st = os.lstat(step)
        except OSError as e:
            return f"{step}: {e.strerror}"
        if stat.S_ISLNK(st.st_mode):  # its directory passed: no one else can change it
            links += 1
            if links > MAX_LINKS:
                return f"{step}: too many symbolic links"
            target = os.readlink(step)
            if target.startswith("/"):
                current = "/"
            parts = list(Path(target).parts[1 if target.startswith("/") else 0:]) + parts
            continue
        why = unsafe_entry(st, sticky_ok=sticky_ok or bool(parts))
        if why:
            return f"{step} is {why}"
        current = step
    return ""


def trusted_dir(path: Path) -> tuple[Path | None, str]:
    """`path`, made if missing (0755), when only root or we can change it; or
    (None, why not: one line)."""
    there = Path(os.path.abspath(path))
    while not os.path.lexists(there) and there != there.parent:
        there = there.parent
    why = unsafe_path(there)  # before anything is made in it
    if why:
        return None, why
    try:
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as e:
        return None, f"cannot make {path}: {e.strerror}"
    why = unsafe_path(path)
    if not why and not path.is_dir():
        why = f"{path} is not a directory"
    return (Path(os.path.realpath(path)), "") if not why else (None, why)


def open_trusted(path: Path) -> tuple[int | None, str]:
    """A descriptor of the regular file `path` (a name in a trusted directory:
    not followed if a link), when only root or we can write it; or (None, why)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, ""
    except OSError as e:
        return None, f"{path}: {e.strerror}"
    st = os.fstat(fd)
    why = "not a regular file" if not stat.S_ISREG(st.st_mode) else unsafe_entry(st)
    if why:
        os.close(fd)
        return None, f"{path} is {why}"
    return fd, ""


def write_new(directory: Path, name: str, fill: Callable[[int, str], None], mode: int = 0o644
              ) -> None:
    """`directory`/`name` replaced, atomically, by what fill(fd, temporary
    path) writes into a new file made there with O_EXCL; OSError if not."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        try:
            fill(fd, tmp)
        finally:
            os.close(fd)
        os.chmod(tmp, mode)
        os.replace(tmp, directory / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
