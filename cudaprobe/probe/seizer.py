"""The child processes of linked processes, told as they are made, and those
held in their fork seized, by a process of cudaprobe's own.

A fork without exec from a process that maps a probed library shares its
parent's mappings and opens nothing, so the open gate never holds it; the
kernel's per-process links do not follow a fork. The new-task tracepoint
sends each child process of a linked process, with its parent, through a
small ring buffer (`forks`, bpf/pairing.bpf.h). A child of a process with a
fork hold (forkhold.py) waits in its fork, in the kernel, for a bounded time,
until it is seized there with ptrace; then it stays stopped until its links
are in, and is traced from its first call.

The seizing is done by this process, not by a thread of cudaprobe's: a thread
must first take Python's lock from the threads making rows, which keep it for
a switch interval (5 ms) at a time, and for longer when their core is taken
from them. Measured on the 2-core machine under a traced loop of calls, a
thread was told of a child 5 ms after its fork at the median and 20-80 ms at
the tail, past the hold's 20 ms bound (those children went on unseized, and
were said); this process, in the same run, 0.1 ms at the median and 1.3 ms at
most. It reads the ring itself, seizes each child of a process with a hold as
it is told (its tracer), and tells cudaprobe of every child through a socket
(`on_fork`, on a thread of cudaprobe's); cudaprobe links it, then asks this
process to let it go (`let_go`), as only its tracer can.

It follows the holds as cudaprobe gives them (`hold`, `drop`); a child whose
forking thread had a hold has one too. `off()` (Ctrl-Z) lets every child it
holds go, and lets each new one go at once, until `on()`. cudaprobe gone
(killed: its end of the socket closed), every child is let go and this
process ends; it ignores the signals a terminal sends its process group
(cudaprobe decides).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import struct
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from cudaprobe.probe.forkhold import ForkHold, Seized

NAME = "cudaprobe-seize"  # its comm (/proc/PID/comm), for ps and for tests
ASK = struct.Struct("<cI")  # cudaprobe -> this process: what, and a pid
TOLD = struct.Struct("<cIIQIBBB")  # this process -> cudaprobe: b"F" and a child, or b"O", b"Z"
HOLD, DROP, LET_GO, OFF, ON, END = b"H", b"D", b"L", b"O", b"N", b"E"
FORK, OFF_DONE, ENDED = b"F", b"O", b"Z"
NICE = -10  # its scheduling priority
ACK_WAIT_S = 0.5  # off(): how long its answer is waited for
MAX_RESTARTS = 5  # seizers started again at most, in a session
WAITING = 2  # forkhold's value of a child's key while it waits in its fork


class _Fork(ctypes.Structure):  # struct cp_fork
    _fields_ = [("child", ctypes.c_uint32), ("parent", ctypes.c_uint32), ("ns", ctypes.c_uint64),
                ("thread", ctypes.c_uint32), ("vfork", ctypes.c_uint32)]


@dataclass
class Told:
    """A child seized, as cudaprobe knows it (its tracer is the seizer)."""
    held: bool  # seized in its hold: none of its calls came before its links


class Seizer:
    def __init__(self, forks_fd: int, holds: ForkHold | None,
                 on_fork: Callable[[int, int, int, int, bool, Told | None], None],
                 on_gone: Callable[[int], None] | None = None) -> None:
        """`on_fork(child, parent, made, thread, vfork, told)`, on a thread of
        this process, for each child made: `made`, when, in CLOCK_MONOTONIC
        nanoseconds; `thread`, the parent's thread that made it; `vfork`, made
        by vfork or posix_spawn (it runs nothing of its own before its exec,
        and is not seized); `told`, where the seizer seized it (None: it runs).
        `on_gone(pid)`, on that thread, where the seizer ended by itself
        (killed): the children it held went on (the kernel let them go), and
        a new seizer is started, which reads the records the ring kept
        meanwhile. OSError where the process cannot be started."""
        from bcc.libbcc import _RINGBUF_CB_TYPE, lib  # noqa: PLC0415 - bcc's, loaded by now

        self.on_fork, self.on_gone = on_fork, on_gone
        self._forks_fd, self._holds, self._lib, self._callback_type = \
            forks_fd, holds, lib, _RINGBUF_CB_TYPE
        self._send_lock = threading.Lock()
        self._acked = threading.Event()
        self._closing = False
        self.restarts = 0
        self._start()
        self._thread = threading.Thread(target=self._read, name="cudaprobe-forks", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        """The seizer process forked, with a socket to it."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        holds = self._holds
        held = holds.holding() if holds is not None else set()
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            raise
        if pid == 0:  # the seizer: never returns
            status = 1
            try:
                ours.close()
                _serve(theirs, self._forks_fd, holds, held, self._lib, self._callback_type)
                status = 0
            finally:
                os._exit(status)
        theirs.close()
        with self._send_lock:
            self._sock, self._pid = ours, pid

    def _gone(self) -> bool:
        """The seizer ended by itself: said, and started again (True), unless
        cudaprobe is closing it or no process can be started."""
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self._pid, 0)
        if self._closing or self.restarts >= MAX_RESTARTS:  # (one that cannot run: once)
            return False
        if self.on_gone is not None:
            with contextlib.suppress(Exception):
                self.on_gone(self._pid)
        old = self._sock
        try:
            self._start()
        except OSError:
            return False
        old.close()
        self.restarts += 1
        return True

    def _read(self) -> None:
        while True:
            try:
                message = self._sock.recv(TOLD.size)
            except OSError:
                message = b""
            if len(message) != TOLD.size:  # the seizer gone
                if self._gone():
                    continue
                return
            what, child, parent, made, thread, vfork, seized, held = TOLD.unpack(message)
            if what == ENDED:
                return
            if what == OFF_DONE:
                self._acked.set()
                continue
            try:
                self.on_fork(child, parent, made, thread, bool(vfork),
                             Told(bool(held)) if seized else None)
            except Exception:  # noqa: BLE001 - one child's failure stops no other's
                pass

    def _ask(self, what: bytes, pid: int = 0) -> None:
        with self._send_lock, contextlib.suppress(OSError):
            self._sock.send(ASK.pack(what, pid))

    def hold(self, pid: int) -> None:
        """`pid` given a fork hold: its children are seized."""
        self._ask(HOLD, pid)

    def drop(self, pid: int) -> None:
        self._ask(DROP, pid)

    def let_go(self, child: int) -> None:
        """A child seized, linked now: let go."""
        self._ask(LET_GO, child)

    def off(self) -> bool:
        """Every child seized let go, and each new one at once, until on();
        whether the seizer said it had done so (within ACK_WAIT_S)."""
        self._acked.clear()
        self._ask(OFF)
        return self._acked.wait(ACK_WAIT_S)

    def on(self) -> None:
        self._ask(ON)

    def close(self) -> None:
        """Every child seized let go; the children made until now told (the
        records left in the ring, none seized), then the seizer ends."""
        self._closing = True
        self._ask(END)
        self._thread.join()
        self._sock.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self._pid, 0)


def _serve(sock: socket.socket, forks_fd: int, holds: ForkHold | None, held: set[int],
           lib: ctypes.CDLL, callback_type: type) -> None:
    """The seizer process: until END (or cudaprobe gone), each fork record
    read from the ring, its child seized where its parent holds, told."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as f:
        f.write(NAME)
    # a child waits, spinning, until this process runs: it runs first (it runs
    # for a moment a fork): 0-3 of 81 children went on unseized at nice 0, 0 at
    # -10 (benchmarks/fork_hold_busy.sh)
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, NICE)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGTSTP, signal.SIGTTIN,
                signal.SIGTTOU):
        signal.signal(sig, signal.SIG_IGN)  # the terminal's signals: cudaprobe decides
    # nothing else held here: a pipe kept open would keep its reader waiting (the
    # ring's reader, cudaprobe's output), a link or program attached
    keep = {sock.fileno(), forks_fd}
    if holds is not None:
        keep.add(holds.map_fd)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for fd in [int(n) for n in os.listdir("/proc/self/fd")]:
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    seized: dict[int, Seized] = {}
    state = {"off": False, "ending": False}

    def tell(what: bytes, child: int = 0, parent: int = 0, made: int = 0, thread: int = 0,
             vfork: bool = False, one: Seized | None = None) -> None:
        sock.send(TOLD.pack(what, child, parent, made, thread, vfork, one is not None,
                            one is not None and one.held))

    def on_record(_ctx: object, data: int, size: int) -> int:
        if size < ctypes.sizeof(_Fork):
            return 0
        rec = ctypes.cast(data, ctypes.POINTER(_Fork))[0]
        child, parent = rec.child, rec.parent
        one = None
        if holds is not None:
            holding = parent in held
            if holding and rec.thread in (0, parent):  # the kernel copied its hold
                held.add(child)
            if state["off"] or state["ending"]:
                holds.release(child)
            elif rec.vfork:  # nothing to hold: the gate holds its exec
                pass
            elif holding or holds.value(child) == WAITING:  # (its hold not told yet)
                one = holds.seize(child)
        if one is not None:
            seized[child] = one
        tell(FORK, child, parent, rec.ns, rec.thread, bool(rec.vfork), one)
        return 0

    def let_go_all() -> None:
        for one in seized.values():
            holds.let_go(one)
        seized.clear()

    keep_callback = callback_type(on_record)  # libbcc holds the pointer
    ring = lib.bpf_new_ringbuf(forks_fd, keep_callback, None)
    if not ring:
        return
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    poller.register(forks_fd, select.POLLIN)
    while True:
        for fd, _events in poller.poll():
            if fd == forks_fd:
                lib.bpf_consume_ringbuf(ring)
                continue
            while True:
                try:
                    message = sock.recv(ASK.size, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                except OSError:
                    message = b""
                if len(message) != ASK.size:  # cudaprobe gone: every child let go
                    let_go_all()
                    return
                what, pid = ASK.unpack(message)
                if what == HOLD:
                    held.add(pid)
                elif what == DROP:
                    held.discard(pid)
                elif what == LET_GO:
                    one = seized.pop(pid, None)
                    if one is not None:
                        holds.let_go(one)
                elif what == OFF:
                    state["off"] = True
                    let_go_all()
                    tell(OFF_DONE)
                elif what == ON:
                    state["off"] = False
                elif what == END:
                    state["ending"] = True
                    let_go_all()
                    lib.bpf_consume_ringbuf(ring)  # the children made until now, told
                    tell(ENDED)
                    return
