"""The ELF file's headers, read with struct: the Elf64 layouts, whether a file
is a usable x86-64 ELF (check_elf), what its program headers say (its
interpreter, its build-id) and where its symbol tables are (symbol_tables).
elfsyms.py reads the symbols with them."""

from __future__ import annotations

import mmap
import os
import struct

from cudaprobe.errors import LibraryNotFound
from cudaprobe.targets.openfile import OpenedFile, open_node_file

# Elf64 little-endian layouts (x86-64 only: check_elf refuses the rest)
EHDR = struct.Struct("<16xHHIQQQIHHHHHH")  # e_type .. e_shstrndx
PHDR = struct.Struct("<IIQQQQQQ")  # p_type, p_flags, p_offset, p_vaddr, p_paddr, filesz, memsz
SHDR = struct.Struct("<IIQQQQIIQQ")  # sh_name, sh_type, flags, addr, offset, size, link ...
SYM = struct.Struct("<IBBHQQ")  # st_name, st_info, st_other, st_shndx, st_value, st_size
ELFCLASS64_LE = b"\x7fELF\x02\x01"
EHDR_SIZE = 64
ET_EXEC = 2
PT_LOAD, PT_INTERP, PT_NOTE = 1, 3, 4
SHT_SYMTAB, SHT_DYNSYM = 2, 11
STT_FUNC, STT_GNU_IFUNC = 2, 10
FUNC_TYPES = (STT_FUNC, STT_GNU_IFUNC)
NT_GNU_BUILD_ID = 3
EM_X86_64 = 62
# e_machine's names, as the ELF specification (and readelf) gives them, for the
# refusal of a library built for another machine
MACHINES = {3: "EM_386", 8: "EM_MIPS", 20: "EM_PPC", 21: "EM_PPC64", 22: "EM_S390",
            40: "EM_ARM", 43: "EM_SPARCV9", 62: "EM_X86_64", 183: "EM_AARCH64",
            243: "EM_RISCV", 258: "EM_LOONGARCH"}


def as_file(source: str | OpenedFile) -> OpenedFile:
    """`source` itself, or the node's file at that path, opened once."""
    return source if isinstance(source, OpenedFile) else open_node_file(source)


def check_elf(source: str | OpenedFile) -> None:
    """Raise LibraryNotFound with the reason when `source` is not a usable x86-64 ELF:
    its header whole, and its section headers within the file."""
    if isinstance(source, str) and os.path.isdir(source):
        raise LibraryNotFound(source, "is a directory without CUDA libraries")
    f = as_file(source)
    path = f.name
    try:
        head = f.pread(EHDR_SIZE, 0)
    except OSError as e:
        raise LibraryNotFound(path, f"cannot read it ({e.strerror})") from None
    size = f.stat.st_size
    if head[:4] != b"\x7fELF":
        raise LibraryNotFound(path, "not an ELF file")
    if len(head) < EHDR_SIZE or head[5] not in (1, 2):
        raise LibraryNotFound(path, "malformed ELF (its header is cut short)")
    machine = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
    if machine != EM_X86_64:
        raise LibraryNotFound(path, f"built for {MACHINES.get(machine, f'e_machine {machine}')}"
                                    ", not x86-64")
    if head[:6] != ELFCLASS64_LE:
        raise LibraryNotFound(path, "malformed ELF (not 64-bit little-endian)")
    shoff, shentsize, shnum = struct.unpack_from("<40xQ10xHH", head)
    if shoff + shentsize * shnum > size:
        raise LibraryNotFound(path, "malformed ELF (its section headers are past its end)")


def symbol_tables(data: mmap.mmap, shoff: int, shentsize: int, shnum: int
                   ) -> list[tuple[bytes, bytes]]:
    """(symbols, their string table) of .dynsym, then of .symtab."""
    shdrs = [SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)] if shoff else []
    out = []
    for wanted in (SHT_DYNSYM, SHT_SYMTAB):
        for sh in shdrs:
            if sh[1] == wanted and sh[9] == SYM.size and sh[6] < len(shdrs):
                strtab = shdrs[sh[6]]
                out.append((data[sh[4] : sh[4] + sh[5]],
                            data[strtab[4] : strtab[4] + strtab[5]]))
    return out


def symbol_name(strtab: bytes, offset: int) -> str:
    """A symbol's name without its @version."""
    name = strtab[offset : strtab.index(b"\0", offset)].decode("utf-8", "replace")
    return name.split("@", 1)[0] if "@" in name else name


def interpreter(source: str | OpenedFile) -> str | None:
    """The program interpreter (ld.so) a dynamic executable names, or None."""
    try:
        with as_file(source).map() as mm:
            if mm[:6] != ELFCLASS64_LE:
                return None
            _t, _m, _v, _e, phoff, _s, _f, _eh, phentsize, phnum, *_ = EHDR.unpack_from(mm)
            for i in range(phnum if phentsize == PHDR.size else 0):
                ph = PHDR.unpack_from(mm, phoff + i * phentsize)
                if ph[0] == PT_INTERP:
                    return mm[ph[2]:ph[2] + ph[5]].rstrip(b"\0").decode()
    except (OSError, ValueError, struct.error, UnicodeDecodeError, LibraryNotFound):
        return None
    return None


_BUILD_IDS: dict[tuple[int, ...], str] = {}  # OpenedFile.key -> its build-id


def build_id_of(source: str | OpenedFile) -> str:
    """The build-id of the ELF file in hex ("" if it has none, or is no ELF),
    read from its headers alone: cheaper than its symbols by far."""
    try:
        f = as_file(source)
        if f.key not in _BUILD_IDS:
            if len(_BUILD_IDS) >= 1024:
                _BUILD_IDS.clear()
            _BUILD_IDS[f.key] = _build_id_of(f)
        return _BUILD_IDS[f.key]
    except (OSError, struct.error, LibraryNotFound):
        return ""


def _build_id_of(f: OpenedFile) -> str:
    head = f.pread(EHDR.size + 16, 0)
    if not head.startswith(b"\x7fELF\x02\x01"):  # 64-bit little-endian only
        return ""
    _etype, _m, _v, _e, phoff, _s, _f, _eh, phentsize, phnum, *_ = EHDR.unpack_from(head)
    table = f.pread(phentsize * phnum, phoff)
    for i in range(phnum):
        p = PHDR.unpack_from(table, i * phentsize)
        if p[0] == PT_NOTE:
            found = build_id_from_notes(f.pread(min(p[5], 1 << 16), p[2]))
            if found:
                return found
    return ""


# BPF_BUILD_ID_SIZE: a stack frame's build-id field is 20 bytes, and the kernel
# pads a shorter one (ld's --build-id=md5 makes 16) with zeros
FRAME_BUILD_ID_HEX = 40


def frame_build_id(build_id: str) -> str:
    """A file's build-id (hex) as a stack frame carries it: padded to 20 bytes."""
    return build_id.ljust(FRAME_BUILD_ID_HEX, "0") if build_id else ""


def file_build_ids(frame_id: str) -> list[str]:
    """The file build-ids a frame's (hex) may stand for, longest first: itself, and
    where it ends in zero bytes, each shorter id the kernel padded into it."""
    out = [frame_id]
    while len(frame_id) > 2 and frame_id.endswith("00"):
        frame_id = frame_id[:-2]
        out.append(frame_id)
    return out


def build_id_from_notes(notes: bytes) -> str:
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
