"""Call sites of traced calls: return addresses named `function+0xoff (module)`.

The return address read at entry (struct cp_event.caller) is exactly where
the call was made, whether or not the code keeps frame pointers. With
--stacks, the user stack the kernel recorded (BPF_STACK_TRACE) adds the
callers; that walk follows frame pointers, so past the first frame of code
built without them (gcc's default from -O1 on) it stops early or goes astray.

A process may be gone before its calls are decoded, and its maps with it.
So the probe records, at the first call from each call site in a process,
the object's build-id and the site's file offset (event.site_frame), and the
stack's frames are build-id and offset too (BPF_F_USER_BUILD_ID): they are
named from the object's symbols, found by build-id (symbolize.KernelSymbolizer).
Without those (a kernel older than 6.12 for the call site, a frame the kernel
could not resolve), addresses resolve through /proc/PID/maps, read when a
process's first event arrives. An address in no known mapping stays an
address; one in an object without a symbol there is `module+0xfileoffset`.
"""

from __future__ import annotations

import os

from cudaprobe.decode.demangle import demangle
from cudaprobe.decode.symbolize import KernelSymbolizer, link_address
from cudaprobe.targets.elfsyms import ElfSymbols

# a stack frame as the kernel resolved it: (build-id in hex, file offset)
Frame = tuple[str, int]


class CallSites(KernelSymbolizer):
    """Callable (pid, address) -> the address's name; `site()` names a whole call site."""

    def __init__(self, proc: str = "/proc") -> None:
        super().__init__(proc)
        self._site_frames: dict[tuple[int, int], Frame] = {}

    def _resolve(self, pid: int, address: int) -> str:
        mapping = self.mapping_of(pid, address)
        if mapping is None:
            return f"{address:#x}"
        file = self.mapped_file(pid, mapping)
        symbols = self._symbols(file) if file is not None else None
        vaddr = link_address(mapping, symbols, address) if symbols else None
        if vaddr is None:
            return f"{os.path.basename(mapping.path)}+{address - mapping.start + mapping.offset:#x}"
        return _named(symbols, vaddr)

    def _resolve_in_frame(self, pid: int, address: int, frame: tuple[str, int, int]
                          ) -> str | None:
        found = self.in_object(pid, address, frame)
        return _named(found[0], found[1]) if found else None

    def frame_name(self, pid: int, frame: Frame) -> str:
        """A stack frame's name: `function+0xoff (module)`, or the build-id and offset."""
        build_id, offset = frame
        symbols = self.symbols_by_build_id(build_id, pid)
        vaddr = symbols.vaddr_of(offset) if symbols else None
        if vaddr is None:
            return f"{build_id[:12]}+{offset:#x}"
        return _named(symbols, vaddr)

    def site(self, pid: int, caller: int, stack: list[Frame] | None = None,
             frame: tuple[str, int, int] | None = None) -> tuple[str, ...]:
        """The call site (`frame`: where the probe found it, the first time), then
        its callers from `stack` (innermost first, as recorded at entry: the probed
        function itself, then, on Linux >= 6.12, the call site again)."""
        callers = (stack or [])[1:]
        if callers and frame is not None and callers[0] == frame[:2]:
            callers = callers[1:]
        elif callers and caller and self._frame_of(pid, caller) == callers[0]:
            callers = callers[1:]
        named = [self(pid, caller, frame)] if caller else []
        return tuple(named + [self.frame_name(pid, f) for f in callers])

    def _frame_of(self, pid: int, address: int) -> Frame | None:
        """The call site as a stack frame, where the probe recorded it earlier."""
        return self._site_frames.get((pid, address))

    def __call__(self, pid: int, address: int, frame: tuple[str, int, int] | None = None
                 ) -> str | None:
        if frame is not None:  # remembered: later calls from here carry no frame
            self._site_frames[(pid, address)] = (frame[0], frame[1] + address - frame[2])
        return super().__call__(pid, address, frame)


def _named(symbols: ElfSymbols, vaddr: int) -> str:
    """`function+0xoff (module)`, or `module+0xfileoffset` where no function holds it."""
    module = os.path.basename(symbols.path)
    found = symbols.function_at(vaddr)
    if found is None:
        return f"{module}+{symbols.file_offset(vaddr) or vaddr:#x}"
    name, start = found
    return f"{demangle(name)}+{vaddr - start:#x} ({module})"
