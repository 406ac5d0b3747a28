"""A child forked without exec, held before its first instruction after
fork until its own links are in.

The kernel's per-process links (uprobe_multi given a pid) do not follow a
fork, and such a child opens nothing the open gate could hold it at: its
first CUDA call may come a few instructions after fork() returns. But a
return probe on glibc's `_Fork` (one tracefs uprobe event a glibc), with a
perf event given the parent's pid, fires in the child too, as fork returns
in it, before its first instruction after: the kernel copies the parent's
pending returns into a child (uprobe_copy_process), and a perf return probe
runs its program for whoever returns. The perf event is opened with
`inherit`, so the kernel copies it into each child (and thread) as it is
made, registering nothing: the child's own forks are held too. The program
is attached through an anchor event on cudaprobe's own process (a child's
inherited copy would take it off the probe as that child exits). There, in
the child, this program waits while the child's
key in `fork_holds` says so: the fork tracepoint put it there (1) before the
child first ran, the program writes 2 as it starts to wait. A BPF program
cannot sleep, so the wait is a loop (bpf_loop) over the key and the clock,
and it is short: cudaprobe's seizer (seizer.py, a process of its own), told
of the child through the `forks` ring, seizes it with ptrace (PTRACE_SEIZE, PTRACE_INTERRUPT) and
writes 3 (a child not yet come out of its fork then marks 4 as it does);
the program returns, and the child stops in a ptrace stop as it
returns to its code, asleep, until its links are in; then it is detached
and goes on. A ptrace stop is told to the tracer alone: its parent sees no
wait status and no SIGCHLD, and its exit status is its own. A child the
seizer does not seize within SEIZE_WAIT_S (a loaded machine, a debugger
that follows forks and traces it already) goes on by itself; the loader
then finds its key gone and says its span, as before. If cudaprobe is
killed, the bound lets a waiting child go and the kernel detaches a
stopped one.

The program is a few instructions written here, not compiled by bcc: bcc
0.26 cannot pass a callback to bpf_loop. A program with a callback needs type
information for its two functions (BTF), made here too.

Only processes that map a probed library get a hold (their forks may call
CUDA at once); a process with a static libc, or none, gets none, and its
children are linked as they are told (seizer.py), their span said.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from cudaprobe.errors import CudaprobeError
from cudaprobe.probe import bpfsys
from cudaprobe.probe.cleanup import append_uprobe_event, remove_uprobe_events, uprobe_events_path
from cudaprobe.targets.elfsyms import read_symbols
from cudaprobe.targets.openfile import Mapped, OpenedFile, open_in_root, open_mapped
from cudaprobe.targets.procmaps import MapLine, map_lines
from cudaprobe.targets.ptrace import PtraceError, Stop, TracedThread

SEIZE_WAIT_S = 0.02  # at most, a child waits in the kernel to be seized (by default)
STOP_WAIT_S = 1.0  # at most, the seizer waits for a seized child's stop
BPF_PROG_TYPE_KPROBE = 2
LOOP_MAX = 1 << 23  # bpf_loop's most iterations a call
LOOP_CALLS = 2  # calls of it (each ~0.2-0.4 s of iterations): the clock ends the wait
# the key's value: its child made; waiting in its fork; seized; seized, then come
# out of its fork (to its stop)
MADE, WAITING, SEIZED, PASSED = 1, 2, 3, 4
# the functions whose return is a fork's in the child: glibc 2.34 on, then older
FORK_FUNCTIONS = ("_Fork", "__libc_fork")
FORK_SYSCALLS = (56, 57, 58, 435)  # x86-64: clone, fork, vfork, clone3
SEIZE_TRIES, SEIZE_RETRY_S = 20, 0.0001
ON_TO_HOLD_S = 0.005  # a child sent on to its hold: seized again after at most this
LIBC_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64",
             "/usr/lib", "/lib")
_AX = 80  # offsetof(struct pt_regs, ax), x86-64: the return value

SYS_PERF_EVENT_OPEN = 298  # x86-64
PERF_ATTR_SIZE = 128  # struct perf_event_attr up to config2 and more (zeroes)
PERF_TYPE_TRACEPOINT = 2
PERF_FLAG_FD_CLOEXEC = 8
PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_SET_BPF = 0x2400, 0x40042408
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

# helpers
_LOOKUP, _DELETE, _KTIME, _PID_TGID, _LOOP = 1, 3, 5, 14, 181


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, dst | src << 4, off, imm)


def _ld64(dst: int, src: int, imm: int) -> bytes:
    """A 64-bit load (two instructions): a map (src 1) or a function (src 4)."""
    return _insn(0x18, dst, src, 0, imm) + _insn(0)


MOV_REG, MOV_IMM, ADD_IMM, RSH_IMM = 0xbf, 0xb7, 0x07, 0x77
LDX_DW, STX_W, STX_DW, ST_DW = 0x79, 0x63, 0x7b, 0x7a
JEQ_IMM, JNE_IMM, JGT_REG, CALL, EXIT = 0x15, 0x55, 0x2d, 0x85, 0x95


def program(map_fd: int, hold_ns: int = int(SEIZE_WAIT_S * 1e9)) -> tuple[bytes, int]:
    """(the instructions, where the callback starts). The stack holds
    {u32 tgid @-16; u64 deadline @-8}, given to the callback as its context.
    The key's value as the child comes out of fork: MADE, it waits (WAITING);
    SEIZED already (seized before it came here), it is marked PASSED and goes
    on (to its stop); anything else, it goes on."""
    def main(out_at: int, cb_at: int) -> list[bytes]:
        passed_at = out_at + 2
        code = [
            _insn(MOV_REG, 6, 1),                      # r6 = regs
            _insn(LDX_DW, 0, 6, _AX),                  # r0 = fork's return value
            _insn(JNE_IMM, 0, 0, out_at - 3),          # the parent's return: nothing
            _insn(CALL, imm=_PID_TGID),
            _insn(RSH_IMM, 0, imm=32),
            _insn(STX_W, 10, 0, -16),                  # tgid
            _ld64(1, 1, map_fd),
            _insn(MOV_REG, 2, 10), _insn(ADD_IMM, 2, imm=-16),
            _insn(CALL, imm=_LOOKUP),
            _insn(JEQ_IMM, 0, 0, out_at - 12),         # not held
            _insn(LDX_DW, 1, 0, 0),
            _insn(JEQ_IMM, 1, 0, passed_at - 14, SEIZED),
            _insn(JNE_IMM, 1, 0, out_at - 15, MADE),
            _insn(ST_DW, 0, 0, 0, WAITING),
            _insn(CALL, imm=_KTIME),
            _insn(ADD_IMM, 0, imm=hold_ns),
            _insn(STX_DW, 10, 0, -8),                  # deadline
        ]
        for _ in range(LOOP_CALLS):
            at = sum(len(c) for c in code) // 8
            code += [_insn(MOV_IMM, 1, imm=LOOP_MAX), _ld64(2, 4, cb_at - at - 2),
                     _insn(MOV_REG, 3, 10), _insn(ADD_IMM, 3, imm=-16),
                     _insn(MOV_IMM, 4, imm=0), _insn(CALL, imm=_LOOP)]
        # the loops' iterations spent before the deadline (a long bound): waiting
        # still, the key out, as past the deadline (WAITING means in here)
        at = sum(len(c) for c in code) // 8
        code += [_ld64(1, 1, map_fd), _insn(MOV_REG, 2, 10), _insn(ADD_IMM, 2, imm=-16),
                 _insn(CALL, imm=_LOOKUP),
                 _insn(JEQ_IMM, 0, 0, out_at - (at + 6)),     # let go already
                 _insn(LDX_DW, 1, 0, 0),
                 _insn(JNE_IMM, 1, 0, out_at - (at + 8), WAITING),  # seized meanwhile
                 _ld64(1, 1, map_fd), _insn(MOV_REG, 2, 10), _insn(ADD_IMM, 2, imm=-16),
                 _insn(CALL, imm=_DELETE)]
        return code + [_insn(MOV_IMM, 0, imm=0), _insn(EXIT),  # out
                       _insn(ST_DW, 0, 0, 0, PASSED),          # passed (r0: the value)
                       _insn(MOV_IMM, 0, imm=0), _insn(EXIT)]

    size = sum(len(c) for c in main(0, 0)) // 8
    out_at = size - 5
    callback = [
        _insn(MOV_REG, 6, 2),                          # r6 = &{tgid, deadline}
        _ld64(1, 1, map_fd), _insn(MOV_REG, 2, 6), _insn(CALL, imm=_LOOKUP),
        _insn(JEQ_IMM, 0, 0, 11),                      # let go: stop
        _insn(LDX_DW, 1, 0, 0),
        _insn(JEQ_IMM, 1, 0, 9, SEIZED),               # seized: it stops as it returns
        _insn(CALL, imm=_KTIME),
        _insn(LDX_DW, 1, 6, 8),
        _insn(JGT_REG, 0, 1, 2),                       # past the deadline
        _insn(MOV_IMM, 0, imm=0), _insn(EXIT),         # go on waiting
        # past it: the key out (the loader then knows it ran on unseized)
        _ld64(1, 1, map_fd), _insn(MOV_REG, 2, 6), _insn(CALL, imm=_DELETE),
        _insn(MOV_IMM, 0, imm=1), _insn(EXIT),
    ]
    return b"".join(main(out_at, size) + callback), size


def btf() -> bytes:
    """Type information for the two functions: `hold` (global) and its callback
    `hold_cb` (static, as the kernel wants a callback), both `long f(void)`."""
    strings = b"\0long\0hold\0hold_cb\0"
    types = (struct.pack("<4I", 1, 1 << 24, 8, 1 << 24 | 64)   # [1] INT long, signed
             + struct.pack("<3I", 0, 13 << 24, 1)              # [2] FUNC_PROTO -> long
             + struct.pack("<3I", 6, 12 << 24 | 1, 2)          # [3] FUNC hold, global
             + struct.pack("<3I", 11, 12 << 24, 2))            # [4] FUNC hold_cb, static
    header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types),
                         len(strings))
    return header + types + strings


def load(map_fd: int, wait_s: float = SEIZE_WAIT_S) -> int:
    """The hold's program, loaded; OSError where the kernel refuses it (no
    bpf_loop before Linux 5.17, no BTF)."""
    insns, callback_at = program(map_fd, int(wait_s * 1e9))
    btf_fd = bpfsys.btf_load(btf())
    try:
        return bpfsys.prog_load(BPF_PROG_TYPE_KPROBE, insns, b"GPL", 0, b"cp_fork_hold",
                                btf_fd=btf_fd, func_info=((0, 3), (callback_at, 4)))
    finally:
        os.close(btf_fd)


class ForkHold:
    """The holds of one session: add(pid) gives a process mapping a probed
    library its hold (its forks' children wait, and theirs: a child inherits
    its parent's perf event); seize(child) and let_go(...) in the seizer (seizer.py);
    release(child) lets one go that is not seized. `on_change(pid, holding)`
    is told of each hold given and dropped (the seizer follows them)."""

    def __init__(self, map_fd: int, wait_s: float = SEIZE_WAIT_S) -> None:
        self._map_fd = map_fd
        self.on_change: Callable[[int, bool], None] | None = None
        self._events_file = uprobe_events_path()
        if self._events_file is None:
            raise OSError("no tracefs uprobe_events")
        self._prog = load(map_fd, wait_s)
        self._lock = threading.Lock()
        self._events: dict[int, int] = {}  # pid -> its perf event (inherited by its forks)
        self._libc: dict[int, Libc] = {}  # pid -> its glibc's fork
        self._by_file: dict[tuple[int, int], Libc | None] = {}
        # each glibc's return probe (a tracefs uprobe event: every perf event on it,
        # and their inherited copies, share its program), and its anchor: a perf
        # event of cudaprobe's own that holds the program (a child's copy, which
        # holds it too, would take it off the probe as that child exits)
        self._tracefs: dict[tuple[int, int], tuple[str, int]] = {}  # identity -> (name, id)
        self._anchors: list[int] = []
        # processes whose hold is on the glibc they will map, not one they map
        # yet (held by the gate at ld.so's open of a CUDA library, or at exec)
        self._unsure: set[int] = set()
        self._inherited: set[int] = set()  # children given theirs by the kernel

    @property
    def map_fd(self) -> int:
        return self._map_fd

    def has(self, pid: int) -> bool:
        return pid in self._events or pid in self._inherited

    def holding(self) -> set[int]:
        """The processes whose forks are held now."""
        with self._lock:
            return set(self._events) | self._inherited

    def inherited(self, child: int, parent: int) -> None:
        """`child` forked by a process with a hold: the kernel copied its perf event
        into the child (from the forking thread: the process's first thread,
        or a thread made after the hold)."""
        if self.has(parent):
            self._inherited.add(child)

    def add(self, pid: int) -> bool:
        """A hold for `pid`'s forks. Where it maps no glibc yet, the one its
        ld.so's directory (or the usual places) in its root holds: a probe
        given its pid goes in as the file is mapped (checked at check()).
        False where none is to be had (a static program, gone)."""
        with self._lock:
            if self.has(pid) or self._prog < 0:
                return self.has(pid)
            libc, sure = self._find(pid)
            if libc is None:
                return False
            try:
                fd = perf_open(self._event_of(libc), pid, inherit=True)
            except OSError:
                return False  # gone, or refused
            self._events[pid] = fd
            self._libc[pid] = libc
            if not sure:
                self._unsure.add(pid)
            if self.on_change is not None:
                self.on_change(pid, True)
            return True

    def _event_of(self, libc: Libc) -> int:
        """The tracefs return probe on `libc`'s fork, made (with its anchor) at its
        first use. Named as bcc names its own, so that one left by a cudaprobe
        killed is removed by the next (cleanup.remove_stale_uprobe_events)."""
        key = libc.file.identity
        if key not in self._tracefs:
            name = f"cudaprobe/fork_hold_{len(self._tracefs)}_bcc_{os.getpid()}"
            append_uprobe_event(self._events_file, f"r:{name} {libc.file.proc_path}:"
                                f"{libc.offset:#x}")
            try:
                with open(os.path.join(os.path.dirname(self._events_file), "events", name,
                                       "id")) as f:
                    event = int(f.read())
                anchor = perf_open(event, os.getpid(), inherit=False)
            except (OSError, ValueError):
                remove_uprobe_events(self._events_file, [name])
                raise OSError("the fork hold's probe could not be made") from None
            self._anchors.append(anchor)
            self._tracefs[key] = (name, event)
            for request, arg in ((PERF_EVENT_IOC_SET_BPF, self._prog),
                                 (PERF_EVENT_IOC_ENABLE, 0)):
                if _libc.ioctl(anchor, request, arg) != 0:
                    raise OSError(ctypes.get_errno(), "the fork hold's program refused")
        return self._tracefs[key][1]

    def unsure(self) -> list[int]:
        return list(self._unsure)

    def check(self, pid: int) -> int | None:
        """A hold put on the glibc `pid` would map: kept if that is the one it
        maps now, else put on that one; the descriptor of the one replaced,
        for the caller to close."""
        mapped = _mapped_libc(pid)
        if mapped is None:
            return None  # not yet
        with self._lock:
            libc = self._libc.get(pid)
            if libc is None or libc.file.identity == _identity(mapped):
                self._unsure.discard(pid)
                return None
        fd = self.drop(pid)
        self.add(pid)
        return fd

    def _find(self, pid: int) -> tuple[Libc | None, bool]:
        """`pid`'s glibc and where its fork returns; and whether it maps it."""
        mapped = _mapped_libc(pid)
        if mapped is not None:
            key = _identity(mapped)
            if key not in self._by_file:
                self._by_file[key] = _fork_return(open_mapped, Mapped(
                    pid, mapped.start, mapped.end, mapped.major, mapped.minor,
                    mapped.inode, mapped.path, mapped.path))
            return self._by_file[key], True
        for path in _libc_places(pid):
            libc = _fork_return(lambda p: open_in_root(pid, p), path)
            if libc is not None:
                key = libc.file.identity
                self._by_file.setdefault(key, libc)
                return self._by_file[key], False
        return None, False

    def seize(self, child: int) -> Seized | None:
        """In the seizer: `child`, of a process with a hold, seized and told to
        stop; None where it cannot be (its key gone: it waited its bound;
        traced by another; gone): then it is let go at once. Waiting in its
        fork, it is held: it stops as it comes out. Not there yet, it is waited
        for: come out of its fork after (its key PASSED), it was held too;
        stopped on its way out of glibc's fork function (its set_robust_list,
        say), it is sent on to its hold and seized there; stopped elsewhere
        (it had no hold: the thread that forked it had none), it was not."""
        if bpfsys.u32_key_lookup(self._map_fd, child, 8) is None:
            return None
        tracee = _seized(child)
        if tracee is None:
            self.release(child)
            return None
        deadline = time.monotonic() + STOP_WAIT_S
        while True:
            try:
                tracee.interrupt()
            except PtraceError:
                tracee.detach()
                self.release(child)
                return None
            was = bpfsys.u32_key_lookup(self._map_fd, child, 8)
            if not bpfsys.u32_key_replace(self._map_fd, child, SEIZED.to_bytes(8, "little")):
                return Seized(tracee, False)  # its wait over meanwhile: it runs, stopped anywhere
            if was is not None and was[0] == WAITING:
                return Seized(tracee, True)
            stop = tracee.wait(max(deadline - time.monotonic(), 0))  # where it stops says
            after = bpfsys.u32_key_lookup(self._map_fd, child, 8)
            if (after is not None and after[0] == PASSED
                    or stop is not None and _in_its_fork(tracee, stop)):
                return Seized(tracee, True, stop)
            if (stop is None or time.monotonic() >= deadline
                    or not in_fork_function(tracee, stop, self._by_file)
                    or not bpfsys.u32_key_replace(self._map_fd, child,
                                                  MADE.to_bytes(8, "little"))):
                return Seized(tracee, False, stop)
            try:  # on to its hold, where it waits (its key WAITING), and seized again
                tracee.resume()
            except PtraceError:
                return Seized(tracee, False)
            on_until = min(time.monotonic() + ON_TO_HOLD_S, deadline)
            while time.monotonic() < on_until and self.value(child) == MADE:
                time.sleep(SEIZE_RETRY_S)

    @staticmethod
    def let_go(seized: Seized) -> None:
        """On the thread that seized it: detached from its stop, a signal that
        stopped it instead delivered (a group stop stays a stop)."""
        tracee = seized.tracee
        stop = seized.stop or tracee.wait(STOP_WAIT_S)
        if stop is None:  # (not stopped yet: stopped first)
            tracee.release(0)
        elif not stop.exited:
            tracee.detach(stop.signal)

    def release(self, child: int) -> bool:
        """Let `child` go (or, not there yet, never hold it): True where it was
        held until now (waiting in its fork, or seized there), so that none of
        its calls came before its links."""
        try:
            value = bpfsys.u32_key_lookup(self._map_fd, child, 8)
            gone = bpfsys.u32_key_delete(self._map_fd, child)
        except OSError:
            return False
        return gone and value is not None and value[0] in (WAITING, PASSED)

    def value(self, child: int) -> int | None:
        """The value of `child`'s key (MADE, WAITING, ...), None where it has none."""
        try:
            value = bpfsys.u32_key_lookup(self._map_fd, child, 8)
        except OSError:
            return None
        return None if value is None else value[0]

    def waiting(self, child: int) -> bool:
        """`child` has its key still (the seizer has not let it go)."""
        return self.value(child) is not None

    def drop(self, pid: int) -> int | None:
        """A process gone: its hold's descriptor, for the caller to close."""
        with self._lock:
            fd = self._events.pop(pid, None)
            self._libc.pop(pid, None)
            self._unsure.discard(pid)
            had = fd is not None or pid in self._inherited
            self._inherited.discard(pid)
            if had and self.on_change is not None:
                self.on_change(pid, False)
        return fd

    def close(self) -> list[int]:
        """Every child waiting let go; every hold's descriptor returned, for the
        caller to close (each waits for a grace period), then remove_probes()."""
        with self._lock:
            fds, self._events = list(self._events.values()), {}
            fds += self._anchors
            self._anchors = []
            self._libc.clear()
            self._by_file.clear()
            self._unsure.clear()
            self._inherited.clear()
            prog, self._prog = self._prog, -1
        for child in bpfsys.u32_keys(self._map_fd):
            self.release(child)
        if prog >= 0:
            os.close(prog)
        return fds

    def remove_probes(self) -> None:
        """The tracefs probes out, once every descriptor on them is closed."""
        names = [name for name, _event in self._tracefs.values()]
        self._tracefs.clear()
        if names and self._events_file is not None:
            remove_uprobe_events(self._events_file, names)


def perf_open(event: int, pid: int, inherit: bool) -> int:
    """A perf event on the tracefs probe `event`, given `pid`; with `inherit`,
    copied by the kernel into each thread and child it makes from then on
    (and enabled: an inherited copy runs the anchor's program)."""
    attr = ctypes.create_string_buffer(PERF_ATTR_SIZE)
    # type (tracepoint), size, config (the event's id), sample_period; flags at 40
    # (bit 1: inherit); wakeup_events at 48
    struct.pack_into("<IIQQ", attr, 0, PERF_TYPE_TRACEPOINT, PERF_ATTR_SIZE, event, 1)
    struct.pack_into("<Q", attr, 40, 2 if inherit else 0)
    struct.pack_into("<I", attr, 48, 1)
    fd = _libc.syscall(SYS_PERF_EVENT_OPEN, attr, pid, -1, -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    if inherit and _libc.ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0:
        err = ctypes.get_errno()
        os.close(fd)
        raise OSError(err, os.strerror(err))
    return fd


def _seized(child: int) -> TracedThread | None:
    """PTRACE_SEIZE of a child just made: the kernel tells of it (the fork
    tracepoint) a moment before ptrace finds it (ESRCH): tried again, for a
    millisecond or so."""
    for _ in range(SEIZE_TRIES):
        try:
            return TracedThread(child)
        except PtraceError as e:
            if e.errno != errno.ESRCH:
                return None
        time.sleep(SEIZE_RETRY_S)
    return None


def _in_its_fork(tracee: TracedThread, stop: Stop) -> bool:
    """Stopped still in the fork's return, before any instruction of its own
    (it had not come to its hold yet when it was seized): the registers of a
    return from clone, clone3, fork or vfork giving 0, or at the return
    probe's trampoline (the kernel's `[uprobes]` page) with fork's 0."""
    if stop.exited or stop.signal:
        return False
    try:
        regs = tracee.registers()
    except PtraceError:
        return False
    if regs.rax != 0:
        return False
    if regs.orig_rax in FORK_SYSCALLS:
        return True
    try:
        return any(m.path == "[uprobes]" and m.start <= regs.rip < m.end
                   for m in map_lines(tracee.tid))
    except CudaprobeError:
        return False


def in_fork_function(tracee: TracedThread, stop: Stop,
                     known: dict[tuple[int, int], Libc | None]) -> bool:
    """Stopped as asked (not by a signal of its own) inside glibc's fork
    function (the child's part of it runs a syscall or two after the fork
    before it returns, where the hold is): it has run none of its own code
    yet. `known`: each glibc's fork, by its file's identity, found once."""
    if stop.exited or not stop.interrupted:
        return False
    try:
        rip = tracee.registers().rip
        m = next((m for m in map_lines(tracee.tid) if m.start <= rip < m.end), None)
    except (PtraceError, CudaprobeError):
        return False
    if m is None or not m.is_file:
        return False
    key = _identity(m)
    if key not in known:
        known[key] = _fork_return(open_mapped, Mapped(
            tracee.tid, m.start, m.end, m.major, m.minor, m.inode, m.path, m.path))
    libc, at = known[key], rip - m.start + m.offset
    return libc is not None and libc.offset <= at < libc.offset + libc.size


@dataclass
class Seized:
    tracee: TracedThread
    held: bool  # seized in its hold: none of its calls came before
    stop: Stop | None = None  # its stop, where seize() waited for it


@dataclass(frozen=True)
class Libc:
    file: OpenedFile
    offset: int  # of the function whose return is a fork's
    size: int = 0  # its size in bytes


def _identity(m: MapLine) -> tuple[int, int]:
    return os.makedev(m.major, m.minor), m.inode


def _mapped_libc(pid: int) -> MapLine | None:
    """The glibc `pid` maps (executable), if it maps one."""
    try:
        lines = map_lines(pid)
    except CudaprobeError:
        return None
    for m in lines:
        if m.is_file and "x" in m.perms and m.path.rsplit("/", 1)[-1].startswith("libc.so"):
            return m
    return None


def _libc_places(pid: int) -> list[str]:
    """Where `pid`'s glibc is, in its root, before it maps it: beside its ld.so
    (glibc installs both in one directory), then the usual places."""
    places = []
    with contextlib.suppress(CudaprobeError):
        for m in map_lines(pid):
            name = m.path.rsplit("/", 1)
            if m.is_file and len(name) == 2 and name[1].startswith("ld-linux"):
                places.append(f"{name[0]}/libc.so.6")
                break
    return places + [f"{d}/libc.so.6" for d in LIBC_DIRS if f"{d}/libc.so.6" not in places]


def _fork_return(opener: Callable[[Any], OpenedFile], where: Any) -> Libc | None:
    """The glibc `opener(where)` opens, and the offset of its fork."""
    try:
        libc = opener(where)
        symbols = read_symbols(libc)
        functions = symbols.functions
    except (CudaprobeError, OSError):
        return None
    for name in FORK_FUNCTIONS:
        if name in functions:
            return Libc(libc, functions[name], symbols.size_of(symbols.vaddrs[name]))
    libc.close()
    return None
