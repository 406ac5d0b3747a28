"""The child processes of processes with links of their own, told as they are made.

A fork without exec from a process that maps a probed library shares its
parent's mappings and opens nothing, so the open gate never holds it; the
kernel's per-process links do not follow a fork. The new-task tracepoint
sends each child process of a linked process, with its parent, through a
small ring buffer (`forks`, bpf/pairing.bpf.h), and this thread hands it on
(Attacher.link_forked) as it comes, rather than at the trace loop's next look
(up to 0.1 s later, more under load): the child is linked at once, or, gone
before, said. Its calls between the fork and its links are still not seen,
and said. A child the ring had no room for is found at the next look.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable

POLL_MS = 100  # how often the thread looks whether it is to stop


class _Fork(ctypes.Structure):  # struct cp_fork
    _fields_ = [("child", ctypes.c_uint32), ("parent", ctypes.c_uint32), ("ns", ctypes.c_uint64),
                ("thread", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class ForkWatch:
    def __init__(self, map_fd: int, on_fork: Callable[[int, int, int, int], None],
                 after_poll: Callable[[bool], bool] | None = None) -> None:
        """`on_fork(child, parent, made, thread)`, on this thread, for each record:
        `made`, when the child was made, in CLOCK_MONOTONIC nanoseconds;
        `thread`, the parent's thread that made it. `after_poll(last)`,
        on this thread after each poll (`last`: the thread's end), says whether
        it waits on something: then the next poll comes within a millisecond."""
        from bcc.libbcc import _RINGBUF_CB_TYPE, lib  # noqa: PLC0415 - bcc's, loaded by now

        self._lib = lib
        self.on_fork = on_fork
        self._callback = _RINGBUF_CB_TYPE(self._record)  # kept: libbcc holds the pointer
        self._ring = lib.bpf_new_ringbuf(map_fd, self._callback, None)
        if not self._ring:
            raise OSError("the forks ring buffer could not be opened")
        self.after_poll = after_poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="cudaprobe-forks",
                                        daemon=True)
        self._thread.start()

    def _record(self, _ctx: Any, data: Any, size: int) -> int:
        if size >= ctypes.sizeof(_Fork):
            rec = ctypes.cast(data, ctypes.POINTER(_Fork))[0]
            try:
                self.on_fork(rec.child, rec.parent, rec.ns, rec.thread)
            except Exception:  # noqa: BLE001 - one child's failure stops no other's
                pass
        return 0

    def _serve(self) -> None:
        busy = False
        while not self._stop.is_set():
            self._lib.bpf_poll_ringbuf(self._ring, 1 if busy else POLL_MS)
            if self.after_poll is not None:
                busy = self.after_poll(False)
        if self.after_poll is not None:
            self.after_poll(True)

    def close(self) -> None:
        """Stop; the records left are handed on first (on this thread)."""
        self._stop.set()
        self._thread.join()
        self._lib.bpf_consume_ringbuf(self._ring)
        self._lib.bpf_free_ringbuf(self._ring)
        self._ring = None
