"""ELF symbol tables: where each function lives in a library or executable.

Reads both .dynsym and .symtab (static cudart's symbols may be local), and
gives the file offset that a uprobe is attached at. Results are cached per
file (path, inode, mtime).
"""

from __future__ import annotations

import bisect
import functools
import os
import stat
from dataclasses import dataclass

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from cudaprobe.errors import LibraryNotFound

EM_X86_64 = "EM_X86_64"


@dataclass(frozen=True)
class ElfSymbols:
    path: str
    is_pie_or_shared: bool
    # symbol name (without @version) -> file offset, where a uprobe attaches
    functions: dict[str, int]
    # symbol name -> link-time virtual address
    vaddrs: dict[str, int]
    # sorted (vaddr, size, name) of all defined functions, for address lookups
    by_address: tuple[tuple[int, int, str], ...]
    # (p_vaddr, p_memsz, p_offset) of each PT_LOAD segment
    loads: tuple[tuple[int, int, int], ...] = ()

    def vaddr_of(self, file_offset: int) -> int | None:
        """The link-time address loaded from `file_offset`, as the PT_LOAD segments map it."""
        for p_vaddr, p_memsz, p_offset in self.loads:
            if p_offset <= file_offset < p_offset + p_memsz:
                return file_offset - p_offset + p_vaddr
        return None

    def name_at(self, vaddr: int) -> str | None:
        """The function whose [start, start+size) holds `vaddr` (link-time address)."""
        found = self.function_at(vaddr)
        return found[0] if found else None

    def function_at(self, vaddr: int) -> tuple[str, int] | None:
        """(name, start address) of the function that holds `vaddr`."""
        i = bisect.bisect_right(self.by_address, (vaddr, float("inf"), "")) - 1
        if i >= 0:
            start, size, name = self.by_address[i]
            if start <= vaddr < start + max(size, 1):
                return name, start
        return None


def check_elf(path: str) -> None:
    """Raise LibraryNotFound with the reason when `path` is not a usable x86-64 ELF."""
    if not os.path.exists(path):
        raise LibraryNotFound(path)
    if os.path.isdir(path):
        raise LibraryNotFound(path, "is a directory without CUDA libraries")
    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block open() for good
        raise LibraryNotFound(path, "not a regular file")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
            if magic != b"\x7fELF":
                raise LibraryNotFound(path, "not an ELF file")
            f.seek(0)
            machine = ELFFile(f).header["e_machine"]
    except PermissionError as e:
        raise LibraryNotFound(path, f"cannot read it ({e.strerror})") from None
    except ELFError as e:
        raise LibraryNotFound(path, f"malformed ELF ({e})") from None
    if machine != EM_X86_64:
        raise LibraryNotFound(path, f"built for {machine}, not x86-64")


def read_symbols(path: str) -> ElfSymbols:
    """The symbols of `path`, opened as given: not through os.path.realpath, which
    would turn /proc/PID/root/lib/x.so (a file in the process's mount namespace)
    into /lib/x.so here."""
    st = os.stat(path)
    return _read_symbols(path, st.st_ino, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _read_symbols(path: str, _ino: int, _mtime: int) -> ElfSymbols:
    check_elf(path)
    try:
        return _parse_symbols(path)
    except ELFError as e:  # a header that reads, sections that do not (a truncated file)
        raise LibraryNotFound(path, f"malformed ELF ({e})") from None


def _parse_symbols(path: str) -> ElfSymbols:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        etype = elf.header["e_type"]
        loads = [
            (s["p_vaddr"], s["p_memsz"], s["p_offset"])
            for s in elf.iter_segments()
            if s["p_type"] == "PT_LOAD"
        ]
        functions: dict[str, int] = {}
        vaddrs: dict[str, int] = {}
        spans: dict[int, tuple[int, str]] = {}
        for section_name in (".dynsym", ".symtab"):
            section = elf.get_section_by_name(section_name)
            if section is None:
                continue
            for sym in section.iter_symbols():
                if sym["st_info"]["type"] not in ("STT_FUNC", "STT_GNU_IFUNC"):
                    continue
                if sym["st_shndx"] == "SHN_UNDEF" or not sym["st_value"]:
                    continue
                name = sym.name.split("@", 1)[0]
                vaddr = sym["st_value"]
                spans.setdefault(vaddr, (sym["st_size"], name))
                if name in functions:
                    continue
                off = _file_offset(loads, vaddr)
                if off is not None:
                    functions[name] = off
                    vaddrs[name] = vaddr
    by_address = tuple(sorted((a, s, n) for a, (s, n) in spans.items()))
    return ElfSymbols(path, etype != "ET_EXEC", functions, vaddrs, by_address, tuple(loads))


def _file_offset(loads: list[tuple[int, int, int]], vaddr: int) -> int | None:
    for p_vaddr, p_memsz, p_offset in loads:
        if p_vaddr <= vaddr < p_vaddr + p_memsz:
            return vaddr - p_vaddr + p_offset
    return None
