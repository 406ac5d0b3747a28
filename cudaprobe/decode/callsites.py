"""Call sites of traced calls: return addresses named `function+0xoff (module)`.

The return address read at entry (struct cp_event.caller) is exactly where
the call was made, whether or not the code keeps frame pointers. With
--stacks, the user stack the kernel recorded (BPF_STACK_TRACE) adds the
callers; that walk follows frame pointers, so past the first frame of code
built without them (gcc's default from -O1 on) it stops early or goes astray.

Addresses resolve through the process's /proc/PID/maps and the mapped
objects' symbol tables, as kernel names do (symbolize.KernelSymbolizer): the
maps are read when a process's first event arrives, so call sites still
resolve after it has exited. An address in no known mapping stays an address;
one in an object without a symbol there is `module+0xfileoffset`.
"""

from __future__ import annotations

import os

from cudaprobe.decode.demangle import demangle
from cudaprobe.decode.symbolize import KernelSymbolizer, link_address


class CallSites(KernelSymbolizer):
    """Callable (pid, address) -> the address's name; `site()` names a whole call site."""

    def _resolve(self, pid: int, address: int) -> str:
        mapping = self.mapping_of(pid, address)
        if mapping is None:
            return f"{address:#x}"
        module = os.path.basename(mapping.path)
        symbols = self._symbols(mapping.path)
        vaddr = link_address(mapping, symbols, address) if symbols else None
        found = symbols.function_at(vaddr) if symbols and vaddr is not None else None
        if found is None:
            return f"{module}+{address - mapping.start + mapping.offset:#x}"
        name, start = found
        return f"{demangle(name)}+{vaddr - start:#x} ({module})"

    def site(self, pid: int, caller: int, stack: list[int] | None = None) -> tuple[str, ...]:
        """The call site, then its callers from `stack` (innermost first, as recorded
        at entry: the probed function itself, then, on Linux >= 6.12, the caller)."""
        callers = (stack or [])[1:]
        if callers and callers[0] == caller:
            callers = callers[1:]
        return tuple(self(pid, a) for a in ([caller] if caller else []) + callers)
