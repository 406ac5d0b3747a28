"""A fast first look at an ELF file: does it define any of these functions?

A PyTorch process maps hundreds of objects, some of them near a gigabyte, and
most of them import CUDA functions without defining them. pyelftools needs
seconds to walk such symbol tables, so this reads only the section headers,
searches each string table once (mmap, one regular expression), and looks at
the symbols only where a wanted name occurs. Objects that pass are then read
in full by elfsyms. The executable counts too: nvcc links the runtime
statically, often as local symbols that only .symtab holds.
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Iterable

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")  # name type flags addr offset size link info align entsize
_SYM = struct.Struct("<IBBHQQ")  # name info other shndx value size
_PHDR = struct.Struct("<IIQQQQQQ")  # type flags offset vaddr paddr filesz memsz align
SHT_SYMTAB, SHT_DYNSYM = 2, 11
PT_INTERP = 3
FUNC_TYPES = (2, 10)  # STT_FUNC, STT_GNU_IFUNC
ELFCLASS64_LE = b"\x7fELF\x02\x01"


def name_pattern(names: Iterable[str]) -> re.Pattern[bytes]:
    """Matches any of `names` as a whole string-table entry's tail.

    No leading NUL: linkers merge string tails, so `cudaFree` may be stored as
    the end of `__wrap_cudaFree`; a symbol points wherever its name starts.
    """
    alternatives = b"|".join(re.escape(n.encode()) for n in sorted(names, key=len, reverse=True))
    return re.compile(b"(?:" + alternatives + b")\0")


def defines_any(path: str, pattern: re.Pattern[bytes]) -> bool:
    """Whether `path` defines a function named by `pattern` (.dynsym or .symtab).

    Anything that is not a readable 64-bit little-endian ELF defines nothing.
    """
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _defines_any(mm, pattern)
    except (OSError, ValueError, struct.error):
        return False


def interpreter(path: str) -> str | None:
    """The program interpreter (ld.so) a dynamic executable names, or None."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if mm[:6] != ELFCLASS64_LE:
                return None
            ehdr = _EHDR.unpack_from(mm, 0)
            phoff, phentsize, phnum = ehdr[5], ehdr[9], ehdr[10]
            for i in range(phnum if phentsize == _PHDR.size else 0):
                ph = _PHDR.unpack_from(mm, phoff + i * phentsize)
                if ph[0] == PT_INTERP:
                    return mm[ph[2]:ph[2] + ph[5]].rstrip(b"\0").decode()
    except (OSError, ValueError, struct.error, UnicodeDecodeError):
        return None
    return None


def _defines_any(mm: mmap.mmap, pattern: re.Pattern[bytes]) -> bool:
    if mm[:6] != ELFCLASS64_LE:
        return False
    ehdr = _EHDR.unpack_from(mm, 0)
    shoff, shentsize, shnum = ehdr[6], ehdr[11], ehdr[12]
    if not shoff or shentsize != _SHDR.size:
        return False
    sections = [_SHDR.unpack_from(mm, shoff + i * shentsize) for i in range(shnum)]
    view = memoryview(mm)
    try:
        for sh in sections:
            if sh[1] not in (SHT_SYMTAB, SHT_DYNSYM) or sh[6] >= len(sections):
                continue
            strtab = sections[sh[6]]
            starts = {m.start() - strtab[4]
                      for m in pattern.finditer(mm, strtab[4], strtab[4] + strtab[5])}
            if starts and _any_defined(view[sh[4]:sh[4] + sh[5]], starts):
                return True
        return False
    finally:
        view.release()


def _any_defined(symbols: memoryview, name_offsets: set[int]) -> bool:
    usable = len(symbols) - len(symbols) % _SYM.size
    for name, info, _other, shndx, value, _size in _SYM.iter_unpack(symbols[:usable]):
        if name in name_offsets and shndx and value and (info & 0xF) in FUNC_TYPES:
            return True
    return False
