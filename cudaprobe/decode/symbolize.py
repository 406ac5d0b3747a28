"""Kernel names for runtime launches: host-stub address -> demangled name.

cudaLaunchKernel(func, ...) is passed the address of the kernel's host stub:
a host function with the kernel's mangled name, in whichever object the
kernel was compiled into (the executable, with static cudart or not, or a
shared library). The address is resolved through /proc/PID/maps to that
object and a file offset, the offset through the object's PT_LOAD segments to
a link-time address (which removes the PIE/shared-library load bias), and
that address to a symbol of .dynsym or .symtab (elfsyms, cached per object).

A process may have exited by the time its launches are decoded, so its maps
are read when it is first seen (`see`); they are read again when an address
lies in none of the objects mapped then (a library dlopen'ed later).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from elftools.common.exceptions import ELFError

from cudaprobe.decode.demangle import demangle
from cudaprobe.errors import CudaprobeError
from cudaprobe.targets.elfsyms import ElfSymbols, read_symbols


@dataclass(frozen=True)
class Mapping:
    """One executable, file-backed line of /proc/PID/maps."""

    start: int
    end: int
    offset: int  # file offset mapped at `start`
    path: str


def parse_maps(text: str) -> list[Mapping]:
    """Executable file mappings, sorted by start address."""
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or "x" not in parts[1] or not parts[5].startswith("/"):
            continue
        if parts[5].endswith(" (deleted)"):
            continue  # replaced on disk: its symbols may not be these any more
        start, end = (int(v, 16) for v in parts[0].split("-"))
        out.append(Mapping(start, end, int(parts[2], 16), parts[5]))
    return sorted(out, key=lambda m: m.start)


def find_mapping(maps: list[Mapping], address: int) -> Mapping | None:
    i = bisect.bisect_right([m.start for m in maps], address) - 1
    if i >= 0 and maps[i].start <= address < maps[i].end:
        return maps[i]
    return None


def link_address(mapping: Mapping, symbols: ElfSymbols, address: int) -> int | None:
    """Where `address` (a runtime address inside `mapping`) is in the object's symbols."""
    return symbols.vaddr_of(address - mapping.start + mapping.offset)


class KernelSymbolizer:
    """Callable (pid, host-stub address) -> demangled kernel name, or None."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self._maps: dict[int, list[Mapping]] = {}
        self._names: dict[tuple[int, int], str | None] = {}

    def _read_maps(self, pid: int) -> list[Mapping] | None:
        try:
            with open(f"{self.proc}/{pid}/maps") as f:
                return parse_maps(f.read())
        except OSError:  # exited, or not ours to read
            return None

    def see(self, pid: int) -> None:
        """Read the maps of a process the first time one of its events arrives."""
        if pid not in self._maps:
            self._maps[pid] = self._read_maps(pid) or []

    def _symbols(self, path: str) -> ElfSymbols | None:
        try:
            return read_symbols(path)
        except (OSError, ELFError, CudaprobeError):
            return None

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
        symbols = self._symbols(mapping.path)
        if symbols is None:
            return None
        vaddr = link_address(mapping, symbols, address)
        name = symbols.name_at(vaddr) if vaddr is not None else None
        return demangle(name) if name else None

    def __call__(self, pid: int, address: int) -> str | None:
        key = (pid, address)
        if key not in self._names:
            self._names[key] = self._resolve(pid, address)
        return self._names[key]
