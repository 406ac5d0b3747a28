"""Where an NCCL communicator keeps its rank and number of ranks, read from
the library's own code.

A communicator (`struct ncclComm`) is opaque: nccl.h does not lay it out, and
its fields move between NCCL versions. But ncclCommUserRank and ncclCommCount
each end by loading one int from the communicator and storing it through
their out-parameter: `mov DISP32(%comm),%eax` ... `mov %eax,(%out)`. DISP32 is
the field's offset in this build of the library. Each function's code must
hold exactly one such load-and-store, and the two offsets must differ, else
the layout is unknown (None) and communicators made before the trace began
stay "rank unknown": a library compiled otherwise gives no layout, not a
wrong one. A communicator is read only where it starts with NCCL_MAGIC,
which NCCL's own checks compare its first word with.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from cudaprobe.errors import CudaprobeError
from cudaprobe.targets.elf import as_file
from cudaprobe.targets.elfsyms import read_symbols
from cudaprobe.targets.openfile import OpenedFile

NCCL_MAGIC = 0x0280028002800280  # struct ncclComm's startMagic (and endMagic)
RANK_FUNCTION, NRANKS_FUNCTION = "ncclCommUserRank", "ncclCommCount"
MAX_CODE = 4096  # bytes of a function's code looked at
# mov DISP32(%reg),%e?? (REX without W, no SIB), then within 8 bytes mov %e??,(%reg)
_LOAD = re.compile(rb"([\x40-\x47]?)\x8b([\x80-\x83\x85-\x8b\x8d-\x93\x95-\x9b\x9d-\xa3"
                   rb"\xa5-\xab\xad-\xb3\xb5-\xbb\xbd-\xbf])(.{4})", re.S)
_STORE = re.compile(rb"([\x40-\x47]?)\x89([\x00-\x3f])", re.S)


@dataclass(frozen=True)
class CommLayout:
    rank_offset: int
    nranks_offset: int


def _reg(rex: bytes, modrm: int) -> int:
    return (8 if rex and rex[0] & 4 else 0) | (modrm >> 3) & 7


def loaded_and_stored(code: bytes) -> set[int]:
    """The offsets of the ints that `code` loads from one register's memory
    and stores straight through another pointer (see the module docstring)."""
    found = set()
    for m in _LOAD.finditer(code):
        dest = _reg(m.group(1), m.group(2)[0])
        after = code[m.end():m.end() + 8]
        for s in _STORE.finditer(after):
            modrm = s.group(2)[0]
            if _reg(s.group(1), modrm) == dest and modrm & 7 not in (4, 5):
                found.add(int.from_bytes(m.group(3), "little", signed=True))
                break
    return found


def _code(file: OpenedFile, name: str) -> bytes:
    table = read_symbols(file)
    vaddr = table.vaddrs.get(name)
    offset = table.functions.get(name)
    if vaddr is None or offset is None:
        return b""
    i = bisect.bisect_left(table.starts, vaddr)
    size = table.sizes[i] if i < len(table.starts) and table.starts[i] == vaddr else 0
    return file.pread(min(size or MAX_CODE, MAX_CODE), offset)


_LAYOUTS: dict[tuple[int, ...], CommLayout | None] = {}  # OpenedFile.key -> its layout


def comm_layout(source: str | OpenedFile) -> CommLayout | None:
    """The rank and nranks offsets of the communicators of a libnccl (an opened
    file, or the node's at a path)."""
    try:
        file = as_file(source)
        if file.key not in _LAYOUTS:
            _LAYOUTS[file.key] = _comm_layout(file)
        return _LAYOUTS[file.key]
    except (OSError, CudaprobeError):
        return None


def _comm_layout(file: OpenedFile) -> CommLayout | None:
    rank = loaded_and_stored(_code(file, RANK_FUNCTION))
    nranks = loaded_and_stored(_code(file, NRANKS_FUNCTION))
    if len(rank) != 1 or len(nranks) != 1 or rank == nranks:
        return None
    (r,), (n,) = rank, nranks
    return CommLayout(r, n) if r > 0 and n > 0 else None
