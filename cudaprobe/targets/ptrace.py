"""ptrace(2) on one thread of another process, for the GPU-time injection
(targets/inject.py): seize, wait for its stops, read and set its registers,
let it go on or detach. x86-64 only, through libc with ctypes.

Every request is made from the thread that seized (ptrace's tracer is a
thread, not a process): the injection runs on cudaprobe's main thread.
PTRACE_SEIZE, unlike PTRACE_ATTACH, does not stop the thread; it goes on
running until a signal stops it, which is what the safe point needs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from dataclasses import dataclass
from signal import SIGTRAP

PTRACE_CONT = 7
PTRACE_GETREGS = 12
PTRACE_SETREGS = 13
PTRACE_DETACH = 17
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_GETSIGINFO = 0x4202
WALL = 0x40000000  # __WALL: wait for a thread of another process too
PTRACE_EVENT_STOP = 128
WAIT_STEP_S = 0.0005

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]

REGISTERS = ("r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax",
             "rcx", "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss",
             "fs_base", "gs_base", "ds", "es", "fs", "gs")


class Registers(ctypes.Structure):
    """struct user_regs_struct (x86-64)."""
    _fields_ = [(name, ctypes.c_ulonglong) for name in REGISTERS]


class PtraceError(OSError):
    pass


def _call(request: int, tid: int, addr: int = 0, data: int | ctypes.c_void_p = 0) -> int:
    ctypes.set_errno(0)
    r = _libc.ptrace(request, tid, ctypes.c_void_p(addr), data if isinstance(data, ctypes.c_void_p)
                     else ctypes.c_void_p(data))
    err = ctypes.get_errno()
    if r == -1 and err:
        raise PtraceError(err, os.strerror(err))
    return r


@dataclass
class Stop:
    """What waitpid said about a traced thread."""
    exited: bool = False  # it exited or was killed: no longer traced
    signal: int = 0  # a signal-delivery stop: its number (0: another kind of stop)
    event: int = 0  # PTRACE_EVENT_* (group stop: PTRACE_EVENT_STOP)
    # PTRACE_EVENT_STOP with SIGTRAP: the stop PTRACE_INTERRUPT asked for, not a
    # group stop (a SIGSTOP the program was sent), which must be left a stop
    interrupted: bool = False


class TracedThread:
    """One seized thread; detached on close unless it exited."""

    def __init__(self, tid: int, options: int = 0) -> None:
        """Seized, with the PTRACE_O_* `options` (cudaprobe follows nothing)."""
        self.tid = tid
        _call(PTRACE_SEIZE, tid, 0, options)
        self.attached = True

    def wait(self, timeout_s: float) -> Stop | None:
        """Its next stop or exit, or None if none came within timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                pid, status = os.waitpid(self.tid, os.WNOHANG | WALL)
            except ChildProcessError:
                self.attached = False
                return Stop(exited=True)
            if pid:
                return self._stop(status)
            if time.monotonic() >= deadline:
                return None
            time.sleep(WAIT_STEP_S)

    def _stop(self, status: int) -> Stop:
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            self.attached = False
            return Stop(exited=True)
        event = status >> 16
        if event:
            return Stop(event=event, interrupted=event == PTRACE_EVENT_STOP
                        and os.WSTOPSIG(status) == SIGTRAP)
        return Stop(signal=os.WSTOPSIG(status))

    def interrupt(self) -> None:
        """Stopped at its next return to its code (PTRACE_INTERRUPT)."""
        _call(PTRACE_INTERRUPT, self.tid)

    def registers(self) -> Registers:
        regs = Registers()
        _call(PTRACE_GETREGS, self.tid, 0, ctypes.c_void_p(ctypes.addressof(regs)))
        return regs

    def set_registers(self, regs: Registers) -> None:
        _call(PTRACE_SETREGS, self.tid, 0, ctypes.c_void_p(ctypes.addressof(regs)))

    def resume(self, signal: int = 0) -> None:
        """On from a stop, delivering `signal` (0: the stop's signal is suppressed)."""
        _call(PTRACE_CONT, self.tid, 0, signal)

    def detach(self, signal: int = 0) -> None:
        if self.attached:
            self.attached = False
            try:
                _call(PTRACE_DETACH, self.tid, 0, signal)
            except PtraceError:
                pass  # running (not in a stop) or gone: the kernel detaches it at our exit

    def release(self, ours: int, timeout_s: float = 2.0) -> None:
        """Detach a thread that may be running: stopped first (PTRACE_INTERRUPT),
        a signal of the program's that stopped it delivered, one of ours
        (`ours`, sent but not yet seen) suppressed."""
        if not self.attached:
            return
        try:
            _call(PTRACE_INTERRUPT, self.tid)
        except PtraceError:
            self.attached = False
            return
        stop = self.wait(timeout_s)
        if stop is None or stop.exited:
            return  # unreachable: the kernel detaches it when cudaprobe exits
        self.detach(stop.signal if stop.signal and stop.signal != ours else 0)
