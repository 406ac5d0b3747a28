"""ELF symbol tables: where each function lives in a library or executable.

Reads both .dynsym and .symtab (static cudart's symbols may be local), and
gives the file offset that a uprobe is attached at. The tables are read with
struct over the mapped file, a whole section per call (struct.iter_unpack),
not as one pyelftools object per symbol: libtorch_cuda.so has ~207k symbols,
which pyelftools took 7 s to read (BENCHMARKS.md has the figures). Names are
cut out of the string table only when asked for. Results are cached per file
(path, inode, mtime); symcache.py keeps them on disk by build-id.
"""

from __future__ import annotations

import bisect
import functools
import mmap
import os
import stat
import struct
from dataclasses import dataclass
from operator import itemgetter

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from cudaprobe.errors import LibraryNotFound

EM_X86_64 = "EM_X86_64"

# Elf64 little-endian layouts (x86-64 only: check_elf refuses the rest)
_EHDR = struct.Struct("<16xHHIQQQIHHHHHH")  # e_type .. e_shstrndx
_PHDR = struct.Struct("<IIQQQQQQ")  # p_type, p_flags, p_offset, p_vaddr, p_paddr, filesz, memsz
_SHDR = struct.Struct("<IIQQQQIIQQ")  # sh_name, sh_type, flags, addr, offset, size, link ...
_SYM_FORMAT = "<IBBHQQ"  # st_name, st_info, st_other, st_shndx, st_value, st_size
_SYM_SIZE = struct.calcsize(_SYM_FORMAT)
ET_EXEC = 2
PT_LOAD, PT_NOTE = 1, 4
SHT_SYMTAB, SHT_DYNSYM, SHT_NOBITS = 2, 11, 8
STT_FUNC, STT_GNU_IFUNC = 2, 10
NT_GNU_BUILD_ID = 3


@dataclass(frozen=True)
class ElfSymbols:
    """The defined functions of one object. `starts` is sorted and holds each
    address once (the first symbol met there: .dynsym's, then .symtab's);
    `sizes[i]` and `names[i]` go with it."""

    path: str
    is_pie_or_shared: bool
    starts: list[int]  # link-time virtual addresses
    sizes: list[int]
    names: list[str]  # without @version
    # (p_vaddr, p_memsz, p_offset) of each PT_LOAD segment
    loads: tuple[tuple[int, int, int], ...] = ()
    build_id: str = ""  # NT_GNU_BUILD_ID in hex, or ""

    @functools.cached_property
    def vaddrs(self) -> dict[str, int]:
        """Every defined function's name (also where it shares its address with
        another) -> link-time address; read from the file when first asked for:
        only the probed libraries need it, and names are most of a big table's cost."""
        return _read_vaddrs(self.path)

    @functools.cached_property
    def functions(self) -> dict[str, int]:
        """Symbol name -> file offset, where a uprobe attaches."""
        out = {}
        for name, vaddr in self.vaddrs.items():
            off = self.file_offset(vaddr)
            if off is not None:
                out[name] = off
        return out

    def file_offset(self, vaddr: int) -> int | None:
        """Where the link-time address `vaddr` is in the file, as PT_LOAD maps it."""
        for p_vaddr, p_memsz, p_offset in self.loads:
            if p_vaddr <= vaddr < p_vaddr + p_memsz:
                return vaddr - p_vaddr + p_offset
        return None

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
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i >= 0:
            start = self.starts[i]
            if start <= vaddr < start + max(self.sizes[i], 1):
                return self.names[i], start
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
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        try:
            return _parse(path, data)
        except (struct.error, ValueError, IndexError) as e:
            raise LibraryNotFound(path, f"malformed ELF ({e})") from None


def _parse(path: str, data: mmap.mmap) -> ElfSymbols:
    (etype, _machine, _version, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum,
     shentsize, shnum, _shstrndx) = _EHDR.unpack_from(data)
    phdrs = [_PHDR.unpack_from(data, phoff + i * phentsize) for i in range(phnum)]
    loads = tuple((p[3], p[6], p[2]) for p in phdrs if p[0] == PT_LOAD)
    build_id = ""
    for p in phdrs:
        if p[0] == PT_NOTE and not build_id:
            build_id = _build_id(data[p[2] : p[2] + p[5]])
    found = []  # (vaddr, size, name offset, string table), .dynsym's first
    strtabs = []
    for table, strtab in _symbol_tables(data, shoff, shentsize, shnum):
        strtabs.append(strtab)
        t = len(strtabs) - 1
        found += [(value, size, st_name, t) for st_name, info, _other, shndx, value, size
                  in struct.iter_unpack(_SYM_FORMAT, table)
                  if (info & 0xF) in (STT_FUNC, STT_GNU_IFUNC) and shndx and value]
    found.sort(key=itemgetter(0))  # stable: the first symbol met at an address stays first
    starts, sizes, names = [], [], []
    last = None
    for value, size, st_name, t in found:
        if value == last:
            continue  # the first symbol at an address names it
        last = value
        starts.append(value)
        sizes.append(size)
        names.append(_name(strtabs[t], st_name))
    return ElfSymbols(path, etype != ET_EXEC, starts, sizes, names, loads, build_id)


def _symbol_tables(data: mmap.mmap, shoff: int, shentsize: int, shnum: int
                   ) -> list[tuple[bytes, bytes]]:
    """(symbols, their string table) of .dynsym, then of .symtab."""
    shdrs = [_SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)] if shoff else []
    out = []
    for wanted in (SHT_DYNSYM, SHT_SYMTAB):
        for sh in shdrs:
            if sh[1] == wanted and sh[9] == _SYM_SIZE and sh[6] < len(shdrs):
                strtab = shdrs[sh[6]]
                out.append((data[sh[4] : sh[4] + sh[5]],
                            data[strtab[4] : strtab[4] + strtab[5]]))
    return out


def _name(strtab: bytes, offset: int) -> str:
    """A symbol's name without its @version."""
    name = strtab[offset : strtab.index(b"\0", offset)].decode("utf-8", "replace")
    return name.split("@", 1)[0] if "@" in name else name


def _read_vaddrs(path: str) -> dict[str, int]:
    """Every defined function's name -> its link-time address, the first definition
    winning, .dynsym's before .symtab's: what attaching by name needs."""
    vaddrs: dict[str, int] = {}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        shoff, shentsize, shnum = struct.unpack_from("<40xQ10xHH", data)
        for table, strtab in _symbol_tables(data, shoff, shentsize, shnum):
            for st_name, info, _other, shndx, value, _size in struct.iter_unpack(
                    _SYM_FORMAT, table):
                if (info & 0xF) in (STT_FUNC, STT_GNU_IFUNC) and shndx and value:
                    vaddrs.setdefault(_name(strtab, st_name), value)
    return vaddrs


def build_id_of(path: str) -> str:
    """The build-id of the ELF file at `path` in hex ("" if it has none, or is no
    ELF), read from its headers alone: cheaper than its symbols by far."""
    try:
        st = os.stat(path)
        return _build_id_of(path, st.st_ino, st.st_mtime_ns)
    except (OSError, struct.error):
        return ""


@functools.lru_cache(maxsize=1024)
def _build_id_of(path: str, _ino: int, _mtime: int) -> str:
    with open(path, "rb") as f:
        head = f.read(_EHDR.size + 16)
        if not head.startswith(b"\x7fELF\x02\x01"):  # 64-bit little-endian only
            return ""
        _etype, _m, _v, _e, phoff, _s, _f, _eh, phentsize, phnum, *_ = _EHDR.unpack_from(head)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        for i in range(phnum):
            p = _PHDR.unpack_from(table, i * phentsize)
            if p[0] == PT_NOTE:
                f.seek(p[2])
                found = _build_id(f.read(min(p[5], 1 << 16)))
                if found:
                    return found
    return ""


def _build_id(notes: bytes) -> str:
    """NT_GNU_BUILD_ID's description in hex, from a PT_NOTE segment's bytes."""
    pos = 0
    while pos + 12 <= len(notes):
        namesz, descsz, ntype = struct.unpack_from("<III", notes, pos)
        name_at = pos + 12
        desc_at = name_at + ((namesz + 3) & ~3)
        if ntype == NT_GNU_BUILD_ID and notes[name_at : name_at + namesz] == b"GNU\0":
            return notes[desc_at : desc_at + descsz].hex()
        pos = desc_at + ((descsz + 3) & ~3)
    return ""
