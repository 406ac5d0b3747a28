"""Symbol tables kept on disk by build-id: a big library is read once per machine.

The probe names the object a launch or a call site is in by its build-id and
a file offset (BPF_F_USER_BUILD_ID stacks), which is all there is once the
process has exited. A table read from a file (elfsyms) is written here under
its build-id, so a later session, or this one after the process is gone,
finds it without the file's path, and without reading a 456 MB library again.

A build-id is what a file claims, not what it is: anyone can make a file
that claims a root library's build-id and name its functions as they like.
A table kept here names the kernels of every later process that maps an
object of that build-id, so only what no one else could have written is kept:
- the cache is a directory only root (cudaprobe not run as root: only root
  or its user) can write, every directory on the way too (targets/cachedir.py);
- a table is stored only if the file it was parsed from (elfsyms' fstat of
  that very file: `ElfSymbols.origin`) is one of the node's own: owned by
  root (or, not root, by us), writable by neither group nor others, and the
  very file (device, inode, size, mtime) that its name, as the process maps
  it, names in cudaprobe's own root, through directories only root can
  change. Owner and mode alone are not enough: a container's image is
  unpacked as root, so the files of a tenant's image are root's, yet theirs
  to choose, and are seen only from the container's mount namespace. A
  user's file, or a container's, is read for its own process but never
  stored, so it names nothing in another's;
- an entry records what it was read from (owner, mode, size, mtime, device,
  inode) and a digest of its own body; one whose digest does not match,
  whose owner is not trusted, or that is not a plain file of ours, is read
  as absent. Entries of older formats, written without these checks, are
  absent too. An entry read back names every process's object of its
  build-id only while its file is still that file; else it names only the
  process it was looked up for (the build-id is that object's all the same).
A lookup by build-id alone (the process gone) thus only ever finds tables
read from the node's files of root's.

Files are <cache>/symbols/<build-id>, the cache being $CUDAPROBE_CACHE_DIR,
else /var/cache/cudaprobe as root, else $XDG_CACHE_HOME/cudaprobe or
~/.cache/cudaprobe: a JSON header line (path, loads, count, origin, digest),
then the start addresses and sizes as 8-byte words, then the names joined by
NUL. Written to a new name (O_EXCL) and renamed, so a reader never sees half
a file; one that does not parse is read as absent.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import sys
from array import array
from pathlib import Path

from cudaprobe.targets.cachedir import (
    cache_root,
    open_trusted,
    trusted_dir,
    unsafe_owner,
    unsafe_path,
    write_new,
)
from cudaprobe.targets.elfsyms import ElfSymbols

FORMAT = 3  # 3: the origin's device and inode
CACHE_VAR = "CUDAPROBE_CACHE_DIR"
_BUILD_ID = re.compile(r"^[0-9a-f]{2,80}$")  # hex: also what keeps it a plain file name


def cache_dir() -> Path:
    return cache_root(CACHE_VAR)


def trusted_origin(symbols: ElfSymbols) -> bool:
    """Whether `symbols` were parsed from one of the node's files no one but
    root (or, not root, us) could write: only such a table may name another
    process's kernels."""
    if len(symbols.origin) != 6:
        return False
    uid, mode, size, mtime, device, inode = symbols.origin
    return not unsafe_owner(uid, mode) and node_file(symbols.path, (device, inode, size, mtime))


@functools.lru_cache(maxsize=256)
def node_file(path: str, identity: tuple[int, int, int, int]) -> bool:
    """Whether `path`, in cudaprobe's own root, names the file of `identity`
    (device, inode, size, mtime ns) through directories no one but root (or
    us) can change. A name under /proc (another process's root) never does:
    what it shows is that process's view."""
    if not path.startswith("/") or path == "/proc" or path.startswith("/proc/"):
        return False
    if unsafe_path(Path(path)):
        return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) == identity


def _directory() -> Path | None:
    directory, _ = trusted_dir(cache_dir() / "symbols")
    return directory


def save(symbols: ElfSymbols) -> None:
    """Keep `symbols` under its build-id; quietly not where it has none, its
    file could be another user's, or the cache cannot be written or is not
    ours alone (names are then read from the file, as before)."""
    if not _BUILD_ID.match(symbols.build_id) or not trusted_origin(symbols):
        return
    directory = _directory()
    if directory is None or os.path.lexists(directory / symbols.build_id):
        return
    body = b"".join((_words(symbols.starts), _words(symbols.sizes),
                     "\0".join(symbols.names).encode("utf-8", "surrogateescape")))
    uid, mode, size, mtime, device, inode = symbols.origin
    header = {"format": FORMAT, "path": symbols.path, "pie": symbols.is_pie_or_shared,
              "loads": symbols.loads, "count": len(symbols.starts),
              "origin": {"uid": uid, "mode": mode, "size": size, "mtime_ns": mtime,
                         "device": device, "inode": inode},
              "digest": hashlib.sha256(body).hexdigest()}

    def fill(fd: int, _tmp: str) -> None:
        with os.fdopen(os.dup(fd), "wb") as f:
            f.write(json.dumps(header).encode() + b"\n")
            f.write(body)
    try:
        write_new(directory, symbols.build_id, fill)
    except OSError:
        pass


def load(build_id: str) -> ElfSymbols | None:
    """The table kept under `build_id`, or None."""
    if not _BUILD_ID.match(build_id):
        return None
    directory = _directory()
    if directory is None:
        return None
    fd, _ = open_trusted(directory / build_id)
    if fd is None:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        end = data.index(b"\n")
        header = json.loads(data[:end])
        if header.get("format") != FORMAT:
            return None
        body = data[end + 1 :]
        if hashlib.sha256(body).hexdigest() != header["digest"]:
            return None
        kept = header["origin"]
        origin = tuple(int(kept[k]) for k in ("uid", "mode", "size", "mtime_ns", "device",
                                               "inode"))
        if unsafe_owner(origin[0], origin[1]):  # not written by this code: not ours
            return None
        n = header["count"]
        starts = _unwords(body[: 8 * n])
        sizes = _unwords(body[8 * n : 16 * n])
        names = body[16 * n :].decode("utf-8", "surrogateescape").split("\0") if n else []
        if len(starts) != n or len(sizes) != n or len(names) != n:
            return None
        loads = tuple(tuple(load) for load in header["loads"])
        return ElfSymbols(header["path"], header["pie"], starts, sizes, names, loads, build_id,
                          origin)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _words(values: list[int]) -> bytes:
    words = array("Q", values)
    if sys.byteorder != "little":
        words.byteswap()
    return words.tobytes()


def _unwords(data: bytes) -> list[int]:
    words = array("Q")
    words.frombytes(data[: len(data) - len(data) % 8])
    if sys.byteorder != "little":
        words.byteswap()
    return words.tolist()
