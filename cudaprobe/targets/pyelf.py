"""CPython in an ELF file: an interpreter executable or a libpython.

What the probes need to find a process's interpreter without reading its
memory from here (docs/pystacks.md): the link-time addresses of
`_PyRuntime` and `PyCode_Type`, the version (`Py_Version` from 3.11, else
the file's name), 3.13's `_Py_DebugOffsets` from the file's data, and for an
executable whose libpython is shared, where its DT_DEBUG entry is and where
that libpython's _DYNAMIC is.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import dataclass

from cudaprobe.errors import LibraryNotFound
from cudaprobe.targets import pyoffsets
from cudaprobe.targets.elf import EHDR, PHDR, PT_LOAD, SYM, symbol_name, symbol_tables
from cudaprobe.targets.openfile import OpenedFile, open_node_file

PT_DYNAMIC = 2
PF_X = 1
DT_NEEDED, DT_STRTAB, DT_RPATH, DT_DEBUG, DT_RUNPATH = 1, 5, 15, 21, 29
WANTED = ("_PyRuntime", "PyCode_Type", "Py_Version")
VERSION_IN_NAME = re.compile(r"python(3)\.(\d+)")
LIB_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
            "/lib", "/usr/lib", "/usr/local/lib")


@dataclass(frozen=True)
class PyImage:
    """An ELF file's view of CPython."""

    path: str
    text_vaddr: int  # the lowest executable PT_LOAD's vaddr (what mm->start_code is, biased)
    runtime: int = 0  # vaddr of _PyRuntime, 0: not defined here
    code_type: int = 0
    version: tuple[int, int] | None = None
    layout: pyoffsets.Layout | None = None
    debug_at: int = 0  # vaddr of the DT_DEBUG entry's value, 0: none
    dynamic: int = 0  # vaddr of _DYNAMIC
    needs_libpython: str = ""  # the libpython it links, found (a path), if any
    load_vaddr: int = 0  # the first PT_LOAD's page: where file offset 0 is, unbiased

    @property
    def readable(self) -> bool:
        return bool(self.runtime and self.code_type and self.layout)


def _data_symbols(data: mmap.mmap) -> dict[str, tuple[int, int]]:
    """WANTED's defined symbols -> (vaddr, size)."""
    shoff, shentsize, shnum = struct.unpack_from("<40xQ10xHH", data)
    found: dict[str, tuple[int, int]] = {}
    for table, strtab in symbol_tables(data, shoff, shentsize, shnum):
        for st_name, _info, _other, shndx, value, size in struct.iter_unpack(SYM.format, table):
            if shndx and value and strtab[st_name:st_name + 12].startswith((b"_Py", b"Py")):
                name = symbol_name(strtab, st_name)
                if name in WANTED:
                    found.setdefault(name, (value, size))
    return found


def _read_vaddr(data: mmap.mmap, loads: list[tuple], vaddr: int, n: int) -> bytes:
    """n bytes at link-time `vaddr` as the file initialises them ("" in .bss)."""
    for p_offset, p_vaddr, p_filesz in loads:
        if p_vaddr <= vaddr and vaddr + n <= p_vaddr + p_filesz:
            return bytes(data[vaddr - p_vaddr + p_offset : vaddr - p_vaddr + p_offset + n])
    return b""


def _dynamic(data: mmap.mmap, loads: list[tuple], ph: tuple) -> list[tuple[int, int]]:
    out = []
    for i in range(ph[5] // 16):
        tag, val = struct.unpack_from("<qQ", data, ph[2] + 16 * i)
        if tag == 0:
            break
        out.append((tag, val))
    return out


def _string(data: mmap.mmap, loads: list[tuple], strtab: int, offset: int) -> str:
    raw = _read_vaddr(data, loads, strtab + offset, 1)
    if not raw:
        return ""
    for p_offset, p_vaddr, p_filesz in loads:
        if p_vaddr <= strtab + offset < p_vaddr + p_filesz:
            start = strtab + offset - p_vaddr + p_offset
            return data[start : data.find(b"\0", start)].decode("utf-8", "replace")
    return ""


def _find_lib(name: str, origin: str, paths: list[str]) -> str:
    if "/" in name:
        return name if os.path.isfile(name) else ""
    for d in [*paths, *LIB_DIRS]:
        candidate = os.path.join(d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin), name)
        if os.path.isfile(candidate):
            return os.path.realpath(candidate)
    return ""


_IMAGES: dict[tuple[int, ...], PyImage | None] = {}  # OpenedFile.key -> what it holds


def read_image(source: str | OpenedFile) -> PyImage | None:
    """CPython in an ELF file; None if it is none of it (no `_PyRuntime`, and no
    libpython needed), or not an ELF file. A path is one of the node's (the
    command's interpreter, those on PATH); a file a process maps comes opened
    (procmaps: through the mapping), and no libpython is looked for by a name
    it gave, which would be one on this side of its mount namespace."""
    try:
        f = source if isinstance(source, OpenedFile) else open_node_file(os.path.realpath(source))
        if f.key not in _IMAGES:
            if len(_IMAGES) >= 64:
                _IMAGES.clear()
            _IMAGES[f.key] = _read_image(f, find_needed=isinstance(source, str))
        return _IMAGES[f.key]
    except (OSError, ValueError, struct.error, LibraryNotFound):
        return None


def _read_image(f: OpenedFile, find_needed: bool) -> PyImage | None:
    path = f.name
    with f.map() as data:
        if data[:6] != b"\x7fELF\x02\x01":
            return None
        ehdr = EHDR.unpack_from(data)
        phoff, phentsize, phnum = ehdr[4], ehdr[8], ehdr[9]
        phdrs = [PHDR.unpack_from(data, phoff + i * phentsize) for i in range(phnum)]
        loads = [(p[2], p[3], p[5]) for p in phdrs if p[0] == PT_LOAD]
        text = min((p[3] for p in phdrs if p[0] == PT_LOAD and p[1] & PF_X), default=0)
        dyn_ph = next((p for p in phdrs if p[0] == PT_DYNAMIC), None)
        dynamic = _dynamic(data, loads, dyn_ph) if dyn_ph else []
        debug_at = next((dyn_ph[3] + 16 * i + 8 for i, (tag, _) in enumerate(dynamic)
                         if tag == DT_DEBUG), 0) if dyn_ph else 0
        syms = _data_symbols(data)
        runtime, code_type = syms.get("_PyRuntime", (0, 0))[0], syms.get("PyCode_Type", (0, 0))[0]
        version = None
        if "Py_Version" in syms:
            raw = _read_vaddr(data, loads, syms["Py_Version"][0], 8)
            version = pyoffsets.version_of_hex(int.from_bytes(raw, "little")) if raw else None
        if version is None:
            m = VERSION_IN_NAME.search(os.path.basename(path))
            version = (int(m[1]), int(m[2])) if m else None
        debug = _read_vaddr(data, loads, runtime, pyoffsets.DEBUG_SIZE) if runtime else b""
        layout = pyoffsets.layout_for(version, debug) if version else None
        needs = ""
        if not runtime:
            strtab = next((v for t, v in dynamic if t == DT_STRTAB), 0)
            names = [_string(data, loads, strtab, v) for t, v in dynamic if t == DT_NEEDED]
            paths = [p for t, v in dynamic if t in (DT_RUNPATH, DT_RPATH)
                     for p in _string(data, loads, strtab, v).split(":") if p]
            lib = next((n for n in names if n.startswith("libpython3")), "")
            if not lib:
                return None
            needs = _find_lib(lib, os.path.dirname(path), paths) if find_needed else ""
        first = min((p[3] - p[2] for p in phdrs if p[0] == PT_LOAD), default=0)
        return PyImage(path, text, runtime, code_type, version, layout, debug_at,
                       dyn_ph[3] if dyn_ph else 0, needs, first & ~0xFFF)


def exe_entry(image: PyImage) -> tuple[PyImage, tuple[int, int, int, int, int]] | None:
    """(the image holding the runtime, struct cp_py_exe's first five fields) for
    an interpreter executable; None where the probes cannot find it from it."""
    if image.readable:
        return image, (image.text_vaddr, 0, 0, image.runtime, image.code_type)
    lib = read_image(image.needs_libpython) if image.needs_libpython else None
    if lib is None or not lib.readable or not image.debug_at:
        return None
    return lib, (image.text_vaddr, image.debug_at, lib.dynamic, lib.runtime, lib.code_type)


def kernel_dev(st_dev: int) -> int:
    """A device number as the kernel's inodes hold it (MKDEV: major << 20 | minor)."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)
