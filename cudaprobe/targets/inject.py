"""Making one stopped thread of a running process load the GPU-time library,
or call one of its functions, with no debugger (docs/gputime.md, "--pid").

The thread is in a signal-delivery stop at the entry of a CUDA call (the safe
point: probe/safepoint.py). The stub (cupti/inject_stub.S, copied out of the
built library) is written once into the unused end of the C library's
executable segment, where nothing runs; a frame (cupti/inject.h: the
thread's registers, the addresses of dlopen/dlsym/dlerror, the function and
its arguments) goes on the thread's stack below its red zone; rsp and rip are
pointed at them, and the thread is let run, with the signal suppressed.

The stub's bytes are written while the thread is stopped at the safe point,
right before it is sent there: a process no thread of which is caught is
never written to. The stub stops twice with the same signal: after it made a
memfd (stage 1: cudaprobe takes that memfd with pidfd_getfd, checks it
(targets/pidfd.py), writes the library into it and sets F_GO) and when done
(stage 2: cudaprobe reads the result). cudaprobe writes into the process only
while the thread is stopped there, so a cudaprobe killed at any moment leaves
the stub to run on alone:
the signal is ignored (it is one the process neither catches nor blocks, and
whose default is to ignore it), F_GO is not 1, nothing is loaded, and the
thread goes back to its CUDA call with every register as it was.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cudaprobe.targets.elfsyms import read_symbols
from cudaprobe.targets.pidfd import HeldProcess, take_memfd
from cudaprobe.targets.procmaps import map_lines
from cudaprobe.targets.ptrace import Registers, TracedThread

SLOT_REGISTERS = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "r8", "r9", "r10", "r11",
                  "r12", "r13", "r14", "r15", "eflags")
PAGE = 4096
SAID_LIMIT = 256  # bytes of a text the process wrote (dlerror()) that are read


def read_layout(header: Path) -> dict[str, int]:
    """inject.h's numeric #defines: the frame's and the control block's offsets."""
    found = re.findall(r"^#define (\w+) (0x[0-9a-fA-F]+|\d+)\b", header.read_text(), re.M)
    return {name: int(value, 0) for name, value in found}


class ProcessMemory:
    """Another process's memory through /proc/PID/mem (root: ptrace access),
    opened by pid while `process` holds it: the memory of that process, not of
    one that took its pid since."""

    def __init__(self, process: HeldProcess) -> None:
        self.fd = os.open(f"/proc/{process.pid}/mem", os.O_RDWR | os.O_CLOEXEC)
        if not process.alive():
            os.close(self.fd)
            raise ProcessLookupError(f"pid {process.pid} has exited")

    def read(self, address: int, size: int) -> bytes:
        return os.pread(self.fd, size, address)

    def write(self, address: int, data: bytes) -> None:
        if os.pwrite(self.fd, data, address) != len(data):
            raise OSError(f"short write at {address:#x}")

    def u64(self, address: int) -> int:
        return struct.unpack("<Q", self.read(address, 8))[0]

    def string(self, address: int, limit: int = 512) -> bytes:
        """The process's bytes up to a NUL, at most `limit`: its words, not ours."""
        return self.read(address, limit).split(b"\0", 1)[0]

    def close(self) -> None:
        os.close(self.fd)


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    offset: int
    path: str


def mappings(pid: int) -> list[Mapping]:
    """Every mapping of the process (procmaps reads /proc/PID/maps, for all)."""
    return [Mapping(m.start, m.end, m.perms, m.offset, m.path) for m in map_lines(pid)]


def map_file(pid: int, m: Mapping) -> str:
    """The mapped file, openable from here whatever the process's mount namespace."""
    return f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}"


@dataclass(frozen=True)
class CodeSpace:
    """Where the stub goes, and the C library's loader functions."""
    stub_address: int
    room: int
    dlopen: int
    dlsym: int
    dlerror: int  # 0: none (an old C library's __libc_dlopen_mode)


LIBC = re.compile(r"/libc(-[\d.]+)?\.so(\.6)?$")
LOADERS = (("dlopen", "dlsym", "dlerror"), ("__libc_dlopen_mode", "__libc_dlsym", ""))


def code_space(pid: int, maps: list[Mapping]) -> CodeSpace | str:
    """The end of libc's executable segment (never unloaded; the rest of its last
    page is not code) and its dlopen; or why there is none."""
    for m in maps:
        if "x" not in m.perms or not LIBC.search(m.path):
            continue
        path = map_file(pid, m)
        symbols = read_symbols(path)
        segment = next((s for s in symbols.loads if s[2] // PAGE * PAGE == m.offset), None)
        if segment is None:
            continue
        vaddr, memsz, offset = segment
        bias = m.start + (offset - m.offset) - vaddr
        code_end = bias + vaddr + memsz
        for names in LOADERS:
            if all(n in symbols.vaddrs for n in names if n):
                addrs = [bias + symbols.vaddrs[n] if n else 0 for n in names]
                return CodeSpace(code_end, m.end - code_end, *addrs)
        return f"its C library ({m.path}) has no dlopen"
    return "it maps no GNU C library (libc.so.6) to run the loader from"


def stub_code(library: Path) -> bytes:
    """gputime_stub's bytes, from the built library file."""
    symbols = read_symbols(str(library))
    i = symbols.names.index("gputime_stub")
    vaddr, size = symbols.starts[i], symbols.sizes[i]
    for seg_vaddr, memsz, offset in symbols.loads:
        if seg_vaddr <= vaddr < seg_vaddr + memsz:
            with open(library, "rb") as f:
                f.seek(offset + vaddr - seg_vaddr)
                return f.read(size)
    raise ValueError(f"{library}: gputime_stub is in no segment")


@dataclass
class StubCall:
    """What the stub is to do: load the library (fn 0, `symbol` looked up after
    dlopen) or call `fn`; with up to three arguments, `text` readable at the
    address of argument TEXT_ARG (the frame's F_TEXT)."""
    fn: int = 0
    symbol: str = ""
    args: tuple[int, int, int] = (0, 0, 0)
    text: str = ""
    text_arg: int = -1  # which argument is replaced by the address of `text`
    memfd_name: str = ""  # loading: the name the stub gives its memfd


@dataclass
class StubResult:
    done: bool = False  # stage 2 was reached: the fields below are the stub's
    result: int = 0
    handle: int = 0
    error: str = ""  # why the stub did not finish
    said: bytes = b""  # dlerror()'s text, the process's words: bounded, not yet escaped
    loaded: bool = False  # the memfd was filled and F_GO given


def run_stub(thread: TracedThread, signal: int, mem: ProcessMemory, layout: dict[str, int],
             space: CodeSpace, stub: bytes, call: StubCall, fill: Callable[[int], str],
             wait_s: float) -> StubResult:
    """With `thread` in a signal-delivery stop: the stub and the frame written,
    the thread sent into the stub, its two stops answered. `fill(fd)` fills the
    memfd the stub made (stage 1) and returns the path to dlopen, or "" to give up."""
    L = layout
    if mem.read(space.stub_address, len(stub)) != stub:  # written once per process
        mem.write(space.stub_address, stub)
    regs = thread.registers()
    ret_slot = regs.rsp - 8 - L["STUB_POP"]
    frame = (ret_slot - L["FRAME_SIZE"]) & ~(L["FRAME_ALIGN"] - 1)
    data = bytearray(L["FRAME_SIZE"])

    def put(offset: int, value: int) -> None:
        struct.pack_into("<q" if value < 0 else "<Q", data, offset, value)

    def put_text(offset: int, text: str, size: int) -> None:
        raw = text.encode()[:size - 1]
        data[offset:offset + len(raw)] = raw

    for i, name in enumerate(SLOT_REGISTERS):
        put(i * 8, getattr(regs, name))
    args = list(call.args)
    if call.text_arg >= 0:
        args[call.text_arg] = frame + L["F_TEXT"]
    for key, value in (("F_RETURN", ret_slot), ("F_DLOPEN", space.dlopen),
                       ("F_DLSYM", space.dlsym), ("F_DLERROR", space.dlerror),
                       ("F_FN", call.fn), ("F_ARG0", args[0]), ("F_ARG1", args[1]),
                       ("F_ARG2", args[2]), ("F_FD", -1), ("F_SIGNAL", signal)):
        put(L[key], value)
    put_text(L["F_MEMFD_NAME"], call.memfd_name, 64)
    put_text(L["F_SYMBOL"], call.symbol, 32)
    put_text(L["F_TEXT"], call.text, 256)
    # all in place before the registers change: from here a cudaprobe gone leaves
    # the stub to run alone, to restore the thread
    mem.write(ret_slot, struct.pack("<Q", regs.rip))
    mem.write(frame, bytes(data))
    moved = Registers.from_buffer_copy(regs)
    moved.rsp, moved.rip = frame, space.stub_address
    thread.set_registers(moved)
    thread.resume(0)
    result = StubResult()
    while True:
        stop = thread.wait(wait_s)
        if stop is None or stop.exited or stop.event:
            result.error = ("the thread exited" if stop and stop.exited else
                            "the thread was stopped by job control" if stop else
                            f"the thread did not come back within {wait_s:.0f} s")
            return result
        if stop.signal != signal:
            thread.resume(stop.signal)  # the program's own: delivered as it would be
            continue
        stage = mem.u64(frame + L["F_STAGE"])
        if stage == L["STAGE_MEMFD"]:
            fd = struct.unpack("<q", mem.read(frame + L["F_FD"], 8))[0]
            path = fill(fd) if fd >= 0 else ""
            if path:
                mem.write(frame + L["F_PATH"], path.encode() + b"\0")
                mem.write(frame + L["F_GO"], struct.pack("<Q", 1))
                result.loaded = True
            mem.write(frame + L["F_STAGE"], struct.pack("<Q", 0))
            thread.resume(0)
        elif stage == L["STAGE_DONE"]:
            result.done = True
            result.result = mem.u64(frame + L["F_RESULT"])
            result.handle = mem.u64(frame + L["F_HANDLE"])
            error = mem.u64(frame + L["F_ERROR"])
            if error:
                result.said = mem.string(error, SAID_LIMIT)
            return result
        else:  # ours, but not the stub's (sent again by the program?): suppressed
            thread.resume(0)


def fill_memfd(process: HeldProcess, fd: int, name: str, data: bytes) -> str:
    """The stub's memfd (stage 1), taken from the process (never reopened by
    number), checked an empty, unsealed memfd of the name the stub gives it,
    filled and sealed; the path its process opens it by, or "" to give up."""
    ours, _ = take_memfd(process, fd, name, 0)
    if ours is None:
        return ""
    try:
        # the process's threads share this open file and its offset: written at 0
        if os.pwrite(ours, data, 0) != len(data):
            return ""
        fcntl.fcntl(ours, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                    | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)
    except OSError:
        return ""
    finally:
        os.close(ours)
    return f"/proc/self/fd/{fd}"
