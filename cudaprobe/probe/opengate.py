"""Holding a new process at its open of a probed library until its probes are in.

Per-process uprobe links (attach.py) keep other processes from taking a trap,
but a child of a traced process gets its own links only once cudaprobe has
made them: a short program started by `bash run.sh` could make all its calls
before. A child opens the library before it can call into it (ld.so or
dlopen opens it, then maps it; execve opens an executable with the runtime
linked in), so a fanotify permission event on each probed file (FAN_OPEN_PERM,
an inode mark) holds the open, in the kernel, while the gate's thread looks:
a process of the traced tree (the `targets` map, which the fork and exec
tracepoints fill before it runs) gets its links, then the open goes on; the
breakpoints are put in as the library is mapped. Any other process's open is
let go at once. Every open is allowed, whatever happens here: the gate never
refuses a file, and when cudaprobe exits, however it exits (kill -9 too), the
kernel lets go every open still held.

fanotify's permission events need CAP_SYS_ADMIN; without it, or on a kernel
without them, `OpenGate.start` says why and children are linked at the next
poll instead (follow.py says for which span).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import select
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

FAN_CLOEXEC, FAN_NONBLOCK, FAN_CLASS_CONTENT = 0x1, 0x2, 0x4
FAN_MARK_ADD, FAN_OPEN_PERM, FAN_ALLOW = 0x1, 0x10000, 0x1
FAN_OPEN_EXEC_PERM, FAN_MARK_FILESYSTEM = 0x40000, 0x100
FAN_Q_OVERFLOW = 0x4000
AT_FDCWD = -100
# file systems that hold no program anyone runs: not watched for execs
PSEUDO = frozenset((
    "proc", "sysfs", "cgroup", "cgroup2", "devpts", "devtmpfs", "mqueue", "debugfs", "tracefs",
    "bpf", "securityfs", "pstore", "configfs", "fusectl", "hugetlbfs", "autofs", "binfmt_misc",
    "efivarfs", "nsfs", "rpc_pipefs", "selinuxfs", "ramfs"))
METADATA = struct.Struct("=IBBHQii")  # struct fanotify_event_metadata
METADATA_VERSION = 3
RESPONSE = struct.Struct("=iI")  # struct fanotify_response
READ_BYTES = 64 * 1024

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                                ctypes.c_char_p]


class GateUnavailable(Exception):
    """The kernel refused the gate: the reason, said to the user."""


Release = Callable[[], None]
Hand = Callable[[Release], None]


class OpenGate:
    """`on_open(pid)` runs, on the gate's thread, for each open of a watched
    file, before the open goes on. It must be quick: the opener waits. It may
    return a function that takes the open over: called with `release`, which
    lets the open go on when called (from any thread, once; later calls do
    nothing), it must see that release is called; meanwhile the gate goes on
    with other opens."""

    def __init__(self, on_open: Callable[[int], Hand | None],
                 on_exec: Callable[[int, int], Hand | None] | None = None) -> None:
        self.on_open = on_open
        # given (pid, descriptor of the file) for each exec on a watched file system
        # (watch_execs), before the exec goes on; quick, and may take it over, like on_open
        self.on_exec = on_exec
        self.held = 0  # opens held for on_open, and let go
        self.errors = 0  # on_open raised (the open went on all the same)
        self._fd = -1
        self._stop_r = self._stop_w = -1
        self._thread: threading.Thread | None = None
        self._watched: set[tuple[int, int]] = set()
        self._tid = 0  # the gate thread's, for the keeper
        self._keeper: subprocess.Popen | None = None
        self._respond = threading.Lock()  # a release against the descriptor's close

    def start(self) -> None:
        """Raises GateUnavailable with the reason."""
        fd = _libc.fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK,
                                 os.O_RDONLY | os.O_CLOEXEC | os.O_LARGEFILE)
        if fd < 0:
            err = ctypes.get_errno()
            why = ("fanotify needs CAP_SYS_ADMIN" if err == errno.EPERM
                   else "this kernel has no fanotify permission events" if err == errno.EINVAL
                   else os.strerror(err))
            raise GateUnavailable(why)
        self._fd = fd
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        running = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(running,),
                                        name="cudaprobe-open-gate", daemon=True)
        self._thread.start()
        running.wait()
        self._keeper = self._start_keeper()

    def _start_keeper(self) -> subprocess.Popen | None:
        """The keeper (gatekeeper.py), which answers for the gate whenever its
        thread is stopped or gone; run by its file, isolated from the
        environment, in a session of its own (no terminal signal stops it)."""
        try:
            return subprocess.Popen(
                [sys.executable, "-I", "-S", str(Path(__file__).with_name("gatekeeper.py")),
                 str(self._fd), str(os.getpid()), str(self._tid)],
                pass_fds=(self._fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            return None  # no keeper: as before it, the gate answers alone
    def watch(self, fd: int, identity: tuple[int, int]) -> None:
        """Hold the opens of the file open at `fd` (a mark on its inode)."""
        if self._fd < 0 or identity in self._watched:
            return
        if _libc.fanotify_mark(self._fd, FAN_MARK_ADD, FAN_OPEN_PERM, fd, None) < 0:
            err = ctypes.get_errno()
            raise GateUnavailable(f"marking a probed file: {os.strerror(err)}")
        self._watched.add(identity)

    def watch_execs(self) -> int:
        """Hold every exec on this node's file systems (a mark on each: tmpfs, ext4,
        overlay, ...; not /proc, /sys and the like) for on_exec. Returns the
        number of file systems watched; one the kernel refuses is left out."""
        if self._fd < 0:
            return 0
        # a process cudaprobe starts meanwhile must never exec while the thread that
        # started it holds the GIL: a vfork'd child (CPython's default) keeps its
        # parent stopped until its exec, which would wait on the gate's thread,
        # which would wait for the GIL. fork, then exec, instead
        subprocess._USE_VFORK = False  # type: ignore[attr-defined]
        subprocess._USE_POSIX_SPAWN = False  # type: ignore[attr-defined]
        seen: set[int] = set()
        for where, kind in mount_points():
            if kind in PSEUDO:
                continue
            try:
                dev = os.stat(where).st_dev
            except OSError:
                continue
            if dev in seen:
                continue
            if _libc.fanotify_mark(self._fd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM,
                                   FAN_OPEN_EXEC_PERM, AT_FDCWD, where.encode()) == 0:
                seen.add(dev)
        return len(seen)

    def close(self, timeout: float | None = None) -> bool:
        """No more holds; opens held now are let go (the kernel allows them as
        the descriptor closes). With `timeout`, gives up (False) if the gate's
        thread is still busy with an open by then: it keeps its descriptor."""
        if self._thread is not None:
            os.write(self._stop_w, b"x")
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
            self._thread = None
        keeper, self._keeper = self._keeper, None
        if keeper is not None:  # its copy of the descriptor first: then ours lets opens go
            with contextlib.suppress(OSError):
                keeper.kill()
            keeper.wait()
        with self._respond:
            for fd in (self._fd, self._stop_r, self._stop_w):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._fd = self._stop_r = self._stop_w = -1
        self._watched.clear()
        return True

    def _serve(self, running: threading.Event) -> None:
        self._tid = threading.get_native_id()
        running.set()
        try:
            self._serve_events()
        except BaseException:  # noqa: BLE001 - never leave an open held: let them all go
            with self._respond:
                fd, self._fd = self._fd, -1
                with contextlib.suppress(OSError):
                    os.close(fd)  # the kernel allows every open still held
            raise

    def _serve_events(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._stop_r in ready:
                return
            try:
                data = os.read(self._fd, READ_BYTES)
            except BlockingIOError:
                continue
            except OSError:
                return
            for pid, fd, mask in events(data):
                self._hold(pid, fd, mask)

    def _hold(self, pid: int, fd: int, mask: int = FAN_OPEN_PERM) -> None:
        release = self._releaser(fd)
        hand = None
        try:
            if pid > 0 and mask & FAN_OPEN_EXEC_PERM:
                if self.on_exec is not None:
                    hand = self.on_exec(pid, fd)
            elif pid > 0:
                hand = self.on_open(pid)
            if hand is not None:
                hand(release)
        except Exception:  # noqa: BLE001 - the open goes on whatever went wrong here
            self.errors += 1
            release()
        finally:
            self.held += 1
            if hand is None:
                release()

    def _releaser(self, event_fd: int) -> Release:
        """Lets the open of one event go on, once. After close() there is nothing
        to answer (the kernel allowed it as the descriptor closed), and the
        event's descriptor is closed all the same."""
        done = threading.Lock()

        def release() -> None:
            if not done.acquire(blocking=False):
                return
            with self._respond:
                if self._fd >= 0:
                    with contextlib.suppress(OSError):  # gone: the opener was killed meanwhile
                        os.write(self._fd, RESPONSE.pack(event_fd, FAN_ALLOW))
                with contextlib.suppress(OSError):
                    os.close(event_fd)
        return release


def events(data: bytes) -> list[tuple[int, int, int]]:
    """(pid, fd, mask) of each permission event in what one read gave, bounded
    by the lengths the records give and by the buffer."""
    found = []
    offset = 0
    while offset + METADATA.size <= len(data):
        length, version, _, _, mask, fd, pid = METADATA.unpack_from(data, offset)
        if version != METADATA_VERSION or length < METADATA.size:
            break
        if fd >= 0 and not mask & FAN_Q_OVERFLOW:
            found.append((pid, fd, mask))
        offset += length
    return found


def mount_points() -> list[tuple[str, str]]:
    """(mount point, file system type) of each mount cudaprobe sees."""
    found = []
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            text = f.read(1 << 22)
    except OSError:
        return []
    for line in text.splitlines():
        fields = line.split()
        try:
            sep = fields.index(b"-")
            where, kind = fields[4], fields[sep + 1]
        except (ValueError, IndexError):
            continue
        # the kernel escapes space, tab, newline and backslash as octal
        path = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), where)
        found.append((os.fsdecode(path), kind.decode("ascii", "replace")))
    return found
