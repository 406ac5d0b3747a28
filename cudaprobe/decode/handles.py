"""Kernel names for driver launches: which CUfunction/CUkernel is which kernel.

cuLaunchKernel gets an opaque handle. The handle is named where it is made:
cuModuleGetFunction(&hfunc, hmod, "name") and cuLibraryGetKernel(&kernel, lib,
"name") copy the name at entry and the handle at exit; cuKernelGetFunction
(&func, kernel) passes a kernel's name on to its function. CUDA accepts a
CUkernel wherever a CUfunction goes, so one table holds both, per process.

Driven by the catalogue: a successful call that writes an OUT_FUNCTION names
it after the call's CSTRING argument, or its CU_FUNCTION argument's name.
"""

from __future__ import annotations

from typing import Any

from cudaprobe.catalogue.functions import ArgKind, Function

# shown for a handle whose making was not traced
UNKNOWN_WHY = "name unknown: not made by a traced call (before tracing started?)"
# key of the kernel name in a call's args, for runtime and driver launches alike
NAME_KEY = "func_name"


class KernelHandles:
    def __init__(self) -> None:
        self._names: dict[tuple[int, int], str] = {}

    def name(self, pid: int, handle: int) -> str | None:
        return self._names.get((pid, handle))

    def learn(self, function: Function, pid: int, args: dict[str, Any]) -> None:
        """Record the handles a successful call of `function` made; `args` decoded."""
        name = None
        for arg in function.args:
            if arg.kind is ArgKind.CSTRING:
                name = args.get(arg.name)
            elif arg.kind is ArgKind.CU_FUNCTION:
                name = args.get(NAME_KEY)
        if not name:
            return
        for arg in function.args:
            if arg.kind is ArgKind.OUT_FUNCTION:
                value = args.get(arg.name)  # None: not read (nouts 0)
                handle = int(value, 16) if value else 0
                if handle:
                    self._names[(pid, handle)] = name
