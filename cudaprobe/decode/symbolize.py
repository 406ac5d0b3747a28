"""Kernel names for runtime launches: host-stub address -> demangled name.

cudaLaunchKernel(func, ...) is passed the address of the kernel's host stub:
a host function with the kernel's mangled name, in whichever object the
kernel was compiled into (the executable, with static cudart or not, or a
shared library). The address is resolved through /proc/PID/maps to that
object and a file offset, the offset through the object's PT_LOAD segments to
a link-time address (which removes the PIE/shared-library load bias), and
that address to a symbol of .dynsym or .symtab (elfsyms, cached per object).

A process may have exited by the time its launches are decoded, and a program
that launches and exits at once is gone before the reader wakes. So the
probe records, at the first launch of each kernel in a process, where the
launch's call site is: the object's build-id and the file offset, resolved by
the kernel at that moment (event.site_frame). The host stub is in the same
object, `func - caller` further on, and the object's symbols are found by
build-id: in this session, in the on-disk cache (targets/symcache.py), or in
a file that may be it (what the process had mapped when seen, and
`add_candidates`: the traced command's executable, the probed libraries).
Without a frame (a kernel older than 6.12, a lost record), names come from
the maps, read when a process is first seen (`see`) and again when an address
lies in none of the objects mapped then (a library dlopen'ed later).
"""

from __future__ import annotations

import bisect
import itertools
import os
import shutil
from dataclasses import dataclass, field

from cudaprobe.decode.demangle import demangle
from cudaprobe.errors import CudaprobeError, LibraryNotFound, ProcessGone
from cudaprobe.targets import procmaps, symcache
from cudaprobe.targets.elf import build_id_of, file_build_ids, frame_build_id
from cudaprobe.targets.elfsyms import ElfSymbols, read_symbols
from cudaprobe.targets.openfile import Mapped, OpenedFile, open_mapped, open_node_file
from cudaprobe.targets.procmaps import DELETED


@dataclass(frozen=True)
class Mapping:
    """One executable, file-backed line of /proc/PID/maps."""

    start: int
    end: int
    offset: int  # file offset mapped at `start`
    path: str
    # (major, minor, inode) the line names: what the file opened must be
    file: tuple[int, int, int] = field(default=(0, 0, 0), compare=False)


def parse_maps(text: str) -> list[Mapping]:
    """Executable file mappings, sorted by start address (replaced on disk ones
    left out: their symbols may not be these any more)."""
    out = [Mapping(m.start, m.end, m.offset, m.path, (m.major, m.minor, m.inode))
           for m in procmaps.parse_maps(text)
           if "x" in m.perms and m.path.startswith("/") and not m.path.endswith(DELETED)]
    return sorted(out, key=lambda m: m.start)


def find_mapping(maps: list[Mapping], address: int) -> Mapping | None:
    i = bisect.bisect_right([m.start for m in maps], address) - 1
    if i >= 0 and maps[i].start <= address < maps[i].end:
        return maps[i]
    return None


def link_address(mapping: Mapping, symbols: ElfSymbols, address: int) -> int | None:
    """Where `address` (a runtime address inside `mapping`) is in the object's symbols."""
    return symbols.vaddr_of(address - mapping.start + mapping.offset)


def files_named_in(argv: list[str]) -> list[str]:
    """The files a command line names, the program found through PATH: for
    `env VAR=x ./app`, ./app among them (which files are ELF is told later)."""
    found = []
    for arg in argv:
        path = shutil.which(arg) if "/" not in arg else arg
        if path and os.path.isfile(path):
            found.append(os.path.abspath(path))
    return found


class KernelSymbolizer:
    """Callable (pid, host-stub address) -> demangled kernel name, or None."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self._maps: dict[int, list[Mapping]] = {}
        self._names: dict[tuple[int, int], str | None] = {}
        self._by_build_id: dict[str, ElfSymbols] = {}  # tables of root's files
        self._by_process: dict[tuple[int, str], ElfSymbols | None] = {}  # the rest, per process
        # files that may hold kernels (add_candidates)
        self._candidates: list[str | OpenedFile] = []

    @classmethod
    def for_session(cls, command: list[str], libraries: list[str | OpenedFile]
                    ) -> KernelSymbolizer:
        """One for a session tracing `command` (may be empty) in `libraries` (the
        probed files, read through their descriptors)."""
        symbolizer = cls()
        probed = list({getattr(f, "identity", f): f for f in libraries}.values())
        symbolizer.add_candidates([*files_named_in(command), *probed])
        return symbolizer

    def add_candidates(self, paths: list[str | OpenedFile]) -> None:
        """Files that may hold the kernels of processes that exit before their maps
        are read: the traced command's executable, the probed libraries."""
        self._candidates += [p for p in paths if p not in self._candidates]

    def _read_maps(self, pid: int) -> list[Mapping] | None:
        try:
            # a process names its files with any bytes: kept, never a UnicodeDecodeError
            with open(f"{self.proc}/{pid}/maps", encoding="utf-8",
                      errors="surrogateescape") as f:
                return parse_maps(f.read())
        except OSError:  # exited, or not ours to read
            return None

    def see(self, pid: int) -> None:
        """Read the maps of a process the first time one of its events arrives."""
        if pid not in self._maps:
            self._maps[pid] = self._read_maps(pid) or []

    def mapped_file(self, pid: int, m: Mapping) -> OpenedFile | None:
        """The file of a mapping: through the mapping while the process lives
        (openfile.open_mapped), else by its name only where that is still the
        device and inode its maps line named; None when neither is."""
        if self.proc == "/proc":
            try:
                return open_mapped(Mapped(pid, m.start, m.end, *m.file, m.path, m.path))
            except LibraryNotFound:
                if procmaps.process_alive(pid):
                    return None
                # a zombie: its map_files and root refuse to open; by name below
            except ProcessGone:
                pass  # exited since its maps were read
        try:
            f = open_node_file(m.path)
        except LibraryNotFound:
            return None
        st = f.stat
        if (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino) != m.file:
            return None
        return f

    def _symbols(self, path: str | OpenedFile) -> ElfSymbols | None:
        try:
            symbols = read_symbols(path)
        except (OSError, CudaprobeError):
            return None
        # by build-id for every process only a table of root's file (symcache says
        # why): a build-id is what a file claims
        key = frame_build_id(symbols.build_id)  # as frames name it
        if key and key not in self._by_build_id and symcache.trusted_origin(symbols):
            self._by_build_id[key] = symbols
            symcache.save(symbols)
        return symbols

    def symbols_by_build_id(self, build_id: str, pid: int) -> ElfSymbols | None:
        """The symbols of the object with `build_id` (a frame's: 20 bytes, a
        shorter file's padded with zeros), wherever they can be found: a table
        another user's file gave, or none found, is for `pid` alone."""
        build_id = frame_build_id(build_id)
        found = self._by_build_id.get(build_id) or self._by_process.get((pid, build_id))
        if found is not None or (pid, build_id) in self._by_process:
            return found
        symbols = next(filter(None, map(symcache.load, file_build_ids(build_id))), None)
        if symbols is None:
            mapped = (self.mapped_file(pid, m) for m in self._maps.get(pid, []))
            found = next((f for f in itertools.chain(mapped, self._candidates)
                          if f is not None and frame_build_id(build_id_of(f)) == build_id),
                         None)
            symbols = self._symbols(found) if found is not None else None
            if symbols is not None and frame_build_id(symbols.build_id) != build_id:
                symbols = None  # not the file looked at a moment before
        if symbols is not None and symcache.trusted_origin(symbols):
            self._by_build_id[build_id] = symbols
        else:
            self._by_process[(pid, build_id)] = symbols
        return symbols

    def in_object(self, pid: int, address: int, frame: tuple[str, int, int]
                  ) -> tuple[ElfSymbols, int] | None:
        """(symbols, link-time address) of `address`, from a frame the probe
        recorded in the same object: (build-id, file offset, address there)."""
        build_id, offset, known = frame
        symbols = self.symbols_by_build_id(build_id, pid)
        vaddr = symbols.vaddr_of(offset + address - known) if symbols else None
        return (symbols, vaddr) if vaddr is not None else None

    def mapping_of(self, pid: int, address: int) -> Mapping | None:
        """The file mapping of `pid` that holds `address`."""
        self.see(pid)
        mapping = find_mapping(self._maps[pid], address)
        if mapping is None:  # mapped since we looked, if the process still runs
            fresh = self._read_maps(pid)
            if fresh:
                self._maps[pid] = fresh
                mapping = find_mapping(fresh, address)
        return mapping

    def _resolve(self, pid: int, address: int) -> str | None:
        mapping = self.mapping_of(pid, address)
        if mapping is None:
            return None
        file = self.mapped_file(pid, mapping)
        symbols = self._symbols(file) if file is not None else None
        if symbols is None:
            return None
        vaddr = link_address(mapping, symbols, address)
        name = symbols.name_at(vaddr) if vaddr is not None else None
        return demangle(name) if name else None

    def _resolve_in_frame(self, pid: int, address: int, frame: tuple[str, int, int]
                          ) -> str | None:
        found = self.in_object(pid, address, frame)
        function = found[0].function_at(found[1]) if found else None
        # a host stub is where a function starts: anything else is not one
        # (a CUkernel handle, or a call site in another object than the stub)
        return demangle(function[0]) if function and function[1] == found[1] else None

    def __call__(self, pid: int, address: int, frame: tuple[str, int, int] | None = None
                 ) -> str | None:
        """The name of the kernel whose host stub is at `address` in `pid`; `frame`
        (event.site_frame), where the probe found the launch's call site."""
        key = (pid, address)
        if frame is not None and self._names.get(key) is None:
            name = self._resolve_in_frame(pid, address, frame)
            if name:
                self._names[key] = name
        if key not in self._names:
            self._names[key] = self._resolve(pid, address)
        return self._names[key]
