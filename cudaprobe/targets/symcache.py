"""Symbol tables kept on disk by build-id: a big library is read once per machine.

The probe names the object a launch or a call site is in by its build-id and
a file offset (BPF_F_USER_BUILD_ID stacks), which is all there is once the
process has exited. A table read from a file (elfsyms) is written here under
its build-id, so a later session, or this one after the process is gone,
finds it without the file's path, and without reading a 456 MB library again.

Files are $CUDAPROBE_CACHE_DIR/symbols/<build-id> (default
$XDG_CACHE_HOME/cudaprobe, else ~/.cache/cudaprobe): a JSON header line
(path, loads, count), then the start addresses and sizes as 8-byte words,
then the names joined by NUL. Written to a temporary name and renamed, so a
reader never sees half a file; one that does not parse is read as absent.
"""

from __future__ import annotations

import json
import os
import re
import sys
from array import array
from pathlib import Path

from cudaprobe.targets.elfsyms import ElfSymbols

FORMAT = 1
_BUILD_ID = re.compile(r"^[0-9a-f]{2,80}$")  # hex: also what keeps it a plain file name


def cache_dir() -> Path:
    base = os.environ.get("CUDAPROBE_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "cudaprobe"


def _file(build_id: str) -> Path | None:
    return cache_dir() / "symbols" / build_id if _BUILD_ID.match(build_id) else None


def save(symbols: ElfSymbols) -> None:
    """Keep `symbols` under its build-id; quietly not where it has none or the
    cache cannot be written (names are then read from the file, as before)."""
    path = _file(symbols.build_id)
    if path is None or path.exists():
        return
    header = {"format": FORMAT, "path": symbols.path, "pie": symbols.is_pie_or_shared,
              "loads": symbols.loads, "count": len(symbols.starts)}
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(json.dumps(header).encode() + b"\n")
            f.write(_words(symbols.starts))
            f.write(_words(symbols.sizes))
            f.write("\0".join(symbols.names).encode("utf-8", "surrogateescape"))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def load(build_id: str) -> ElfSymbols | None:
    """The table kept under `build_id`, or None."""
    path = _file(build_id)
    if path is None:
        return None
    try:
        data = path.read_bytes()
        end = data.index(b"\n")
        header = json.loads(data[:end])
        if header.get("format") != FORMAT:
            return None
        n = header["count"]
        pos = end + 1
        starts = _unwords(data[pos : pos + 8 * n])
        sizes = _unwords(data[pos + 8 * n : pos + 16 * n])
        names = data[pos + 16 * n :].decode("utf-8", "surrogateescape").split("\0") if n else []
        if len(starts) != n or len(sizes) != n or len(names) != n:
            return None
        loads = tuple(tuple(load) for load in header["loads"])
        return ElfSymbols(header["path"], header["pie"], starts, sizes, names, loads, build_id)
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
