"""What the GPU-time library in a running process answers, read as what it
is: the process's memory, which the process may have written anything into.
Its control block (cupti/inject.h) is taken only where our library's memfd
is mapped writable, every field bounded and checked; a text it carries (why
CUPTI refused, the loader's dlerror()) is cut to a bound and quoted as the
process's words (escaped where it is shown), never said as cudaprobe's own.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cudaprobe.targets.inject import Mapping, ProcessMemory

MAX_SAID = 256  # bytes of the process's text kept in a message
MAX_FD = 1 << 20  # above any RLIMIT_NOFILE a kernel allows (fs.nr_open)
CONTROL_MAGIC = b"CPATTC2\0"  # inject.h's, NUL and all (tests/unit/test_inject.py)


def quoted(said: bytes) -> str:
    """The process's text, bounded, in quotes. Not escaped here: every message
    is escaped where it is shown (output/notices.py), and escaping twice would
    show each backslash doubled."""
    return f'"{said[:MAX_SAID].decode(errors="replace")}"'


@dataclass(frozen=True)
class Control:
    state: int
    fd: int
    owner: int
    why: bytes


def read_control(mem: ProcessMemory, address: int, layout: dict[str, int],
                 library: list[Mapping]) -> Control | str:
    """The control block at `address` (what the library's attach function
    returned), or why it is not one: it must lie in a writable mapping of the
    library's memfd (`library`), carry the magic and a known state."""
    L = layout
    size = L["CONTROL_SIZE"]
    if not any("w" in m.perms and m.start <= address and address + size <= m.end
               for m in library):
        return "its GPU-time library answered with an address outside itself"
    block = mem.read(address, size)
    if len(block) != size or block[L["C_MAGIC"]:L["C_MAGIC"] + 8] != CONTROL_MAGIC:
        return "its GPU-time library answered with no control block"
    state, fd, owner = struct.unpack_from("<IiI", block, L["C_STATE"])
    if state > L["ATTACH_STOPPED"] or (state == L["ATTACH_RECORDING"] and not 0 <= fd < MAX_FD):
        return "its GPU-time library answered with a control block out of range"
    why = block[L["C_WHY"]:size].split(b"\0", 1)[0]
    return Control(state, fd, owner, why)
