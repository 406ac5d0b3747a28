"""Kernel names for driver launches: which CUfunction/CUkernel is which kernel.

cuLaunchKernel gets an opaque handle. The handle is named where it is made:
cuModuleGetFunction(&hfunc, hmod, "name") and cuLibraryGetKernel(&kernel, lib,
"name") copy the name at entry and the handle at exit; cuKernelGetFunction
(&func, kernel) passes a kernel's name on to its function. CUDA accepts a
CUkernel wherever a CUfunction goes, so one table holds both, per process.

Driven by the catalogue: a successful call that writes an OUT_FUNCTION names
it after the call's CSTRING argument, or its CU_FUNCTION argument's name.

A handle made before cudaprobe attached (PyTorch makes its kernels' handles
when its libraries load) is named from the driver's own object instead: on
driver 580 (CUDA 13) a CUfunction, a CUkernel and the runtime's cudaKernel_t
all hold, at byte NAME_POINTER_OFFSET of the object they address, a pointer to
the kernel's mangled name (found with scripts/gpu/handle_layout.cu, which asks
cuFuncGetName/cuKernelGetName and searches the handle for that pointer:
docs/gpu-results/handle-layout.txt). The probe reads it at the handle's
first launch in a process and sends it after the event (seen_in_record);
where none came, it is read once per handle from /proc/PID/mem. Either is
kept only if it is a C identifier (a mangled name or an extern "C" one): a
driver with another layout gives none, not a wrong one.
"""

from __future__ import annotations

import os
import re
import struct
from typing import Any

from cudaprobe.catalogue.functions import NCCL, ArgKind, Function
from cudaprobe.decode.nccl import Communicators, MemoryReader
from cudaprobe.decode.ranks import Ranks
from cudaprobe.probe.event import NAME_MAX

# shown for a handle that is named neither by a traced call nor in its memory
UNKNOWN_WHY = "name unknown: not made by a traced call, and not readable from the handle"
NAME_POINTER_OFFSET = 8
_IDENTIFIER = re.compile(rb"[A-Za-z_$][A-Za-z0-9_$.]*")
_CHUNK = 256
# key of the kernel name in a call's args, for runtime and driver launches alike
NAME_KEY = "func_name"


def _as_name(data: bytes) -> str | None:
    """The NUL-terminated string at the start of `data`, if it is an identifier."""
    name = data.split(b"\0", 1)[0]
    return name.decode() if _IDENTIFIER.fullmatch(name) else None


def read_name(mem_fd: int, handle: int) -> str | None:
    """The kernel name a driver handle points to, read through `mem_fd`
    (/proc/PID/mem), or None where it holds no readable identifier."""
    try:
        raw = os.pread(mem_fd, 8, handle + NAME_POINTER_OFFSET)
        if len(raw) < 8:
            return None
        (at,) = struct.unpack("<Q", raw)
        name = b""
        while len(name) < NAME_MAX:  # a chunk at a time: a read past the mapping fails
            chunk = os.pread(mem_fd, _CHUNK, at + len(name))
            if not chunk:
                return None
            name += chunk
            if b"\0" in chunk:
                break
    except (OSError, OverflowError):
        return None
    return _as_name(name)


class KernelHandles:
    """Kernel handles' names per process, (`communicators`) what is known of
    NCCL communicators, learned from the calls that make them, and (`ranks`)
    each process's rank in its job."""

    def __init__(self) -> None:
        self._names: dict[tuple[int, int], str] = {}
        self._read: dict[tuple[int, int], str | None] = {}  # from the handles' memory
        self._mem: dict[int, int] = {}  # pid -> its /proc/PID/mem, open
        self.ranks = Ranks()  # each process's rank in its job (decode/ranks.py)
        self.communicators = Communicators(MemoryReader(self._mem_of), self.ranks)

    def name(self, pid: int, handle: int) -> str | None:
        """The handle's kernel name: as a traced call made it, else as the
        driver's object holds it (read once)."""
        key = (pid, handle)
        name = self._names.get(key)
        if name is None and handle:
            if key not in self._read:
                fd = self._mem_of(pid)
                self._read[key] = read_name(fd, handle) if fd >= 0 else None
            name = self._read[key]
        return name

    def seen_in_record(self, pid: int, handle: int, text: bytes) -> None:
        """The name the probe read from the handle's object at its first launch
        (a record's text), kept if it is an identifier: a process that has
        exited since is named all the same."""
        name = _as_name(text)
        if handle and name:
            self._read[(pid, handle)] = name

    def _mem_of(self, pid: int) -> int:
        fd = self._mem.get(pid)
        if fd is None:
            try:
                fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                fd = -1  # gone, or not ours to read: no names from memory
            self._mem[pid] = fd
        return fd

    def close(self) -> None:
        for fd in self._mem.values():
            if fd >= 0:
                os.close(fd)
        self._mem.clear()

    def learn(self, function: Function, pid: int, args: dict[str, Any]) -> None:
        """Record the handles a successful call of `function` made; `args` decoded."""
        if function.api == NCCL:
            self.communicators.learn(function, pid, args)
            return
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
