"""ELF symbol tables: where each function lives in a library or executable,
and the quick look that comes before (defines_any). The headers they are
found with are elf.py's.

Reads both .dynsym and .symtab (static cudart's symbols may be local), and
gives the file offset that a uprobe is attached at. The tables are read with
struct over the mapped file, a whole section per call (struct.iter_unpack),
not as one pyelftools object per symbol: libtorch_cuda.so has ~207k symbols,
which pyelftools took 7 s to read (BENCHMARKS.md has the figures). Names are
cut out of the string table only when asked for. Each file is read through
the one descriptor it was opened with (openfile.py: a process's file is never
opened by its name), and results are cached by what that descriptor holds
(device, inode, size, mtime, ctime); symcache.py keeps them on disk by build-id.

A PyTorch process maps hundreds of objects, some of them near a gigabyte, and
most of them import CUDA functions without defining them: defines_any reads
only the section headers, searches each string table once (mmap, one regular
expression made from a trie of the names), and looks at the symbols only where a wanted name occurs.
Objects that pass are then read in full. The executable counts too: nvcc
links the runtime statically, often as local symbols that only .symtab holds.
"""

from __future__ import annotations

import bisect
import functools
import mmap
import re
import struct
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from cudaprobe.errors import LibraryNotFound
from cudaprobe.targets.elf import (
    EHDR,
    ELFCLASS64_LE,
    ET_EXEC,
    FUNC_TYPES,
    PHDR,
    PT_LOAD,
    PT_NOTE,
    SHDR,
    SHT_DYNSYM,
    SHT_SYMTAB,
    SYM,
    as_file,
    build_id_from_notes,
    check_elf,
    symbol_name,
    symbol_tables,
)
from cudaprobe.targets.openfile import OpenedFile


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
    # (uid, mode, size, mtime ns, device, inode) of the file as read (fstat of the
    # very file parsed): symcache keeps the tables of the node's own files alone
    origin: tuple[int, ...] = ()
    # the descriptor it was read from (None: from symcache), kept for `vaddrs`
    file: OpenedFile | None = field(default=None, compare=False, repr=False)

    @functools.cached_property
    def vaddrs(self) -> dict[str, int]:
        """Every defined function's name (also where it shares its address with
        another) -> link-time address; read from the file when first asked for:
        only the probed libraries need it, and names are most of a big table's cost.
        Empty for a table from the disk cache: it has no file to read."""
        return _read_vaddrs(self.file) if self.file is not None else {}

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

    def size_of(self, vaddr: int) -> int:
        """The size of the function that starts at `vaddr` (0: none starts there)."""
        i = bisect.bisect_left(self.starts, vaddr)
        return self.sizes[i] if i < len(self.starts) and self.starts[i] == vaddr else 0

    def function_at(self, vaddr: int) -> tuple[str, int] | None:
        """(name, start address) of the function that holds `vaddr`."""
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i >= 0:
            start = self.starts[i]
            if start <= vaddr < start + max(self.sizes[i], 1):
                return self.names[i], start
        return None


_TABLES: OrderedDict[tuple[int, ...], ElfSymbols] = OrderedDict()  # OpenedFile.key ->
TABLES_KEPT = 64


def read_symbols(source: str | OpenedFile) -> ElfSymbols:
    """The symbols of an opened file, or of the node's file at a path (opened as
    given: not through os.path.realpath)."""
    f = as_file(source)
    table = _TABLES.get(f.key)
    if table is None:
        check_elf(f)
        try:
            with f.map() as data:
                table = _parse(f, data)
        except (struct.error, ValueError, IndexError) as e:
            raise LibraryNotFound(f.name, f"malformed ELF ({e})") from None
        _TABLES[f.key] = table
        if len(_TABLES) > TABLES_KEPT:
            _TABLES.popitem(last=False)
    _TABLES.move_to_end(f.key)
    return table


def _parse(f: OpenedFile, data: mmap.mmap) -> ElfSymbols:
    (etype, _machine, _version, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum,
     shentsize, shnum, _shstrndx) = EHDR.unpack_from(data)
    phdrs = [PHDR.unpack_from(data, phoff + i * phentsize) for i in range(phnum)]
    loads = tuple((p[3], p[6], p[2]) for p in phdrs if p[0] == PT_LOAD)
    build_id = ""
    for p in phdrs:
        if p[0] == PT_NOTE and not build_id:
            build_id = build_id_from_notes(data[p[2] : p[2] + p[5]])
    found = []  # (vaddr, size, name offset, string table), .dynsym's first
    strtabs = []
    for table, strtab in symbol_tables(data, shoff, shentsize, shnum):
        strtabs.append(strtab)
        t = len(strtabs) - 1
        found += [(value, size, st_name, t) for st_name, info, _other, shndx, value, size
                  in struct.iter_unpack(SYM.format, table)
                  if (info & 0xF) in FUNC_TYPES and shndx and value]
    found.sort(key=itemgetter(0))  # stable: the first symbol met at an address stays first
    starts, sizes, names = [], [], []
    last = None
    for value, size, st_name, t in found:
        if value == last:
            continue  # the first symbol at an address names it
        last = value
        starts.append(value)
        sizes.append(size)
        names.append(symbol_name(strtabs[t], st_name))
    st = f.stat  # the very file parsed: symcache keeps tables of root's files alone
    return ElfSymbols(f.name, etype != ET_EXEC, starts, sizes, names, loads, build_id,
                      origin=(st.st_uid, st.st_mode, st.st_size, st.st_mtime_ns,
                              st.st_dev, st.st_ino), file=f)


def _read_vaddrs(f: OpenedFile) -> dict[str, int]:
    """Every defined function's name -> its link-time address, the first definition
    winning, .dynsym's before .symtab's: what attaching by name needs."""
    vaddrs: dict[str, int] = {}
    with f.map() as data:
        shoff, shentsize, shnum = struct.unpack_from("<40xQ10xHH", data)
        for table, strtab in symbol_tables(data, shoff, shentsize, shnum):
            for st_name, info, _other, shndx, value, _size in struct.iter_unpack(
                    SYM.format, table):
                if (info & 0xF) in FUNC_TYPES and shndx and value:
                    vaddrs.setdefault(symbol_name(strtab, st_name), value)
    return vaddrs


class NamePattern:
    """Finds where any of `names` starts as a whole string-table entry's tail.

    No leading NUL: linkers merge string tails, so `cudaFree` may be stored as
    the end of `__wrap_cudaFree`; a symbol points wherever its name starts. A
    lookahead, so that a name inside another (`ncclAllReduce` in
    `pncclAllReduce`) is found too.

    The names go in as a trie (`cu(?:da(?:Free|Malloc)|Init)`), not as one
    alternative each: the regular expression engine tries alternatives one by
    one at every byte, and with a thousand flat ones the string tables of a
    PyTorch process took 45 s (BENCHMARKS.md, "Finding CUDA in a process").
    And one expression per first two bytes (`cu`, `nc`), each starting with
    them as a literal: the engine then skips to each place they occur at
    memchr's speed, where a lookahead first tried every byte (a 76 MB string
    table of libtorch in 0.07 s, not 0.66).
    """

    def __init__(self, names: Iterable[str]) -> None:
        groups: dict[bytes, dict] = {}
        for name in set(names):
            raw = name.encode()
            node = groups.setdefault(raw[:2], {})
            for byte in raw[2:]:
                node = node.setdefault(byte, {})
            node[None] = {}
        self._patterns = [re.compile(re.escape(head) + b"(?=" + _alternatives(trie) + b"\\0)")
                          for head, trie in sorted(groups.items())]

    def starts(self, data: Any, begin: int, end: int) -> set[int]:
        """Offsets from `begin` in data[begin:end] where a name starts."""
        return {m.start() - begin for p in self._patterns for m in p.finditer(data, begin, end)}


def name_pattern(names: Iterable[str]) -> NamePattern:
    """A NamePattern of `names`."""
    return NamePattern(names)


def _alternatives(node: dict) -> bytes:
    """The regular expression of a trie node: each byte followed by its subtree."""
    branches = [re.escape(bytes([byte])) + _alternatives(node[byte])
                for byte in sorted(k for k in node if k is not None)]
    if not branches:
        return b""
    body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
    return b"(?:" + body + b")?" if None in node else body


def defines_any(source: str | OpenedFile, pattern: NamePattern) -> bool:
    """Whether the file defines a function named by `pattern` (.dynsym or .symtab).

    Anything that is not a readable 64-bit little-endian ELF defines nothing.
    """
    try:
        with as_file(source).map() as mm:
            return _defines_any(mm, pattern)
    except (OSError, ValueError, struct.error, LibraryNotFound):
        return False


def _defines_any(mm: mmap.mmap, pattern: NamePattern) -> bool:
    if mm[:6] != ELFCLASS64_LE:
        return False
    shoff, shentsize, shnum = struct.unpack_from("<40xQ10xHH", mm)
    if not shoff or shentsize != SHDR.size:
        return False
    sections = [SHDR.unpack_from(mm, shoff + i * shentsize) for i in range(shnum)]
    view = memoryview(mm)
    try:
        for sh in sections:
            if sh[1] not in (SHT_SYMTAB, SHT_DYNSYM) or sh[6] >= len(sections):
                continue
            strtab = sections[sh[6]]
            starts = pattern.starts(mm, strtab[4], strtab[4] + strtab[5])
            if starts and _any_defined(view[sh[4]:sh[4] + sh[5]], starts):
                return True
        return False
    finally:
        view.release()


def _any_defined(symbols: memoryview, name_offsets: set[int]) -> bool:
    """Whether a symbol named at one of `name_offsets` is a defined function.
    The names column is read as every sixth 32-bit word (a 24-byte entry
    starts with st_name), so only the symbols with a wanted name are unpacked:
    a PyTorch library has over 500,000."""
    usable = len(symbols) - len(symbols) % SYM.size
    if usable % 4 or not name_offsets:
        return False
    names = symbols[:usable].cast("I")[::SYM.size // 4]
    for i, name in enumerate(names):
        if name in name_offsets:
            _name, info, _other, shndx, value, _size = SYM.unpack_from(symbols, i * SYM.size)
            if shndx and value and (info & 0xF) in FUNC_TYPES:
                return True
    return False
