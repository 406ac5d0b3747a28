"""The open gate's keeper (opengate.py): a small process of its own that holds
the gate's fanotify descriptor too, and lets every held open and exec on the
node go on whenever cudaprobe cannot answer them: its gate thread stopped
(SIGSTOP, a debugger's stop) or gone, or cudaprobe gone. While the gate
thread runs, the keeper reads nothing.

    python -m cudaprobe.probe.gatekeeper FD PID TID

FD: the fanotify descriptor, passed down; PID: cudaprobe; TID: its gate thread.
The keeper is in a session of its own, so that the terminal's Ctrl-Z or Ctrl-C
never stops it with cudaprobe. It exits when cudaprobe does (its pidfd), or when
the gate thread has ended; its copy of the descriptor goes with it, and then the
kernel lets every open still held go on.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import struct
import sys

LOOK_S = 0.05  # how often the gate thread's state is read
READ_BYTES = 64 * 1024
METADATA = struct.Struct("=IBBHQii")  # struct fanotify_event_metadata (opengate.py's)
RESPONSE = struct.Struct("=iI")
FAN_ALLOW = 0x1
STOPPED = (b"T", b"t")  # stopped by a signal, or by a tracer
NAME = b"cudaprobe-gate"  # its process name (comm), as ps shows it


def thread_state(pid: int, tid: int) -> bytes | None:
    """The thread's state letter (None: gone)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return None
    rest = stat[stat.rfind(b")") + 2:]
    return rest[:1] or None


def allow_all(fd: int) -> int:
    """Every event waiting on `fd` answered FAN_ALLOW; how many."""
    answered = 0
    while True:
        try:
            data = os.read(fd, READ_BYTES)
        except BlockingIOError:
            return answered
        except OSError:
            return answered
        offset = 0
        while offset + METADATA.size <= len(data):
            length, _version, _, _, _mask, event_fd, _pid = METADATA.unpack_from(data, offset)
            if length < METADATA.size:
                break
            if event_fd >= 0:
                with contextlib.suppress(OSError):
                    os.write(fd, RESPONSE.pack(event_fd, FAN_ALLOW))
                with contextlib.suppress(OSError):
                    os.close(event_fd)
                answered += 1
            offset += length


def keep(fd: int, pid: int, tid: int) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return  # cudaprobe is gone already
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    while True:
        if poller.poll(LOOK_S * 1000):
            return  # cudaprobe exited: our copy of the descriptor goes, opens go on
        state = thread_state(pid, tid)
        if state is None:
            return  # the gate thread ended (closed, or failed): so do we
        if state in STOPPED:
            allow_all(fd)


def main() -> None:
    fd, pid, tid = (int(a) for a in sys.argv[1:4])
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(NAME), 0, 0, 0)  # PR_SET_NAME
    try:
        keep(fd, pid, tid)
    finally:
        os.close(fd)


if __name__ == "__main__":
    main()
