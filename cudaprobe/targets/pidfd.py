"""A running process held by a pidfd, and the descriptors the GPU-time
injection takes from it (targets/inject.py, sessions/gputime_attach.py).

A pid is a number the kernel gives again once its process is gone: a check
made by number may be of another process than the one later opened. A pidfd
names one process for as long as it is held; it becomes readable when that
process exits, so a /proc/PID file opened while it is not readable was that
process's.

A descriptor of the process is never reopened by number (/proc/PID/fd/N):
that opens, as root and anew, whatever file the process put at N, a file it
may not itself write (an O_PATH descriptor needs no permission on the file).
pidfd_getfd(2) instead gives us the very open file the process holds, with
the access it was opened with, and what it is is checked before any use:
a memfd (shmem's device, as a memfd of our own making has; F_GET_SEALS
answers only for a memfd), of the name and seals expected, and not larger
than a bound.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import select
import stat
from functools import cache

SYS_PIDFD_GETFD = 438  # x86-64
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class HeldProcess:
    """`pid` held by a pidfd from the first check to the last use."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd = os.pidfd_open(pid)  # ProcessLookupError: gone already

    def alive(self) -> bool:
        """Not exited (a zombie has exited): what was opened by its pid before
        this said so was its."""
        return not select.select([self.fd], [], [], 0)[0]

    def take_fd(self, target_fd: int) -> int:
        """Our own descriptor of the open file at `target_fd` in the process."""
        ours = _libc.syscall(SYS_PIDFD_GETFD, self.fd, target_fd, 0)
        if ours < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return int(ours)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@cache
def memfd_device() -> int:
    """The device every memfd (shmem) is on, from one of our own."""
    fd = os.memfd_create("cudaprobe-device-check", os.MFD_CLOEXEC)
    try:
        return os.fstat(fd).st_dev
    finally:
        os.close(fd)


def memfd_mismatch(fd: int, name: str, max_size: int) -> str:
    """Why our descriptor `fd` is not a writable, unsealed memfd named `name`
    (readlink's "/memfd:NAME (deleted)") of at most `max_size` bytes; "" if it is."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_dev != memfd_device():
        return "not a memfd"
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        return "not a memfd"
    if os.readlink(f"/proc/self/fd/{fd}") != name:
        return "a memfd of another name"
    if seals:
        return "a sealed memfd"
    if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDWR:
        return "a memfd not open for writing"
    if st.st_size > max_size:
        return f"a memfd of {st.st_size} bytes (at most {max_size} expected)"
    return ""


def take_memfd(process: HeldProcess, target_fd: int, name: str, max_size: int
               ) -> tuple[int | None, str]:
    """The process's memfd at `target_fd` as our own descriptor, checked; or
    None and why not."""
    try:
        ours = process.take_fd(target_fd)
    except OSError as e:
        return None, f"no descriptor {target_fd} ({e.strerror})"
    try:
        why = memfd_mismatch(ours, name, max_size)
    except OSError as e:
        why = e.strerror or "unreadable"
    if why:
        os.close(ours)
        return None, why
    return ours, ""
