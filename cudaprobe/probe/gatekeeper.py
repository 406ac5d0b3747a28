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
kernel lets every open still held go on. A cudaprobe that exited without
closing its gate (killed) removed nothing: the keeper then removes the tracefs
uprobe events it made (the fork holds', forkhold.py) before it exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import select
import struct
import sys
import time

LOOK_S = 0.05  # how often the gate thread's state is read
EXIT_WAIT_S = 30.0  # the gate thread gone: how long cudaprobe may take to be gone too
REMOVE_WAIT_S = 5.0  # at most, the keeper waits to remove a killed cudaprobe's probes
TRACEFS_EVENTS = ("/sys/kernel/debug/tracing/uprobe_events", "/sys/kernel/tracing/uprobe_events")
EVENT = re.compile(r"^[pr]:(\S+/\S+_bcc_(\d+))(\s|$)")  # cleanup.py's
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


def keep(fd: int, pid: int, tid: int) -> bool:
    """Until cudaprobe exits (True) or its gate thread ends (False)."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return True  # cudaprobe is gone already
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    while True:
        if poller.poll(LOOK_S * 1000):
            return True  # cudaprobe exited: our copy of the descriptor goes, opens go on
        state = thread_state(pid, tid)
        if state is None:
            return False  # the gate thread ended (closed, or failed, or cudaprobe going)
        if state in STOPPED:
            allow_all(fd)


def remove_probes_of(pid: int) -> None:
    """cudaprobe gone (killed: it removed nothing): the tracefs uprobe events it
    made (its fork holds', named `..._bcc_PID`, as cleanup.py removes stale
    ones), once the kernel has let go of the perf events on them (it closes
    them as the process ends). Run with -I -S, this file imports nothing of
    cudaprobe's."""
    path = next((p for p in TRACEFS_EVENTS if os.path.isfile(p)), None)
    deadline = time.monotonic() + REMOVE_WAIT_S
    while path is not None:
        try:
            with open(path) as f:
                ours = [m.group(1) for m in map(EVENT.match, f.read().splitlines())
                        if m and int(m.group(2)) == pid]
        except OSError:
            return
        busy = False
        for name in ours:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)  # never O_TRUNC: every probe
                try:
                    os.write(fd, f"-:{name}\n".encode())
                finally:
                    os.close(fd)
            except FileNotFoundError:
                continue
            except OSError:
                busy = True  # EBUSY: the kernel has not freed its events yet
        if not busy or time.monotonic() > deadline:
            return
        time.sleep(LOOK_S)


def main() -> None:
    fd, pid, tid = (int(a) for a in sys.argv[1:4])
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(NAME), 0, 0, 0)  # PR_SET_NAME
    try:
        exited = keep(fd, pid, tid)
    finally:
        os.close(fd)
    if exited or gone_within(pid, EXIT_WAIT_S):  # (a killed process's threads go first,
        remove_probes_of(pid)  # then its descriptors, each probe a grace period)


def gone_within(pid: int, seconds: float) -> bool:
    """Whether cudaprobe has exited within `seconds`."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return True
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(seconds * 1000))
    finally:
        os.close(pidfd)


if __name__ == "__main__":
    main()
