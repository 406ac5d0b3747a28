"""Perf-event uprobes (the fallback on kernels without uprobe_multi), attached
through libbcc with its real prototype.

bcc 0.26's Python binding declares bpf_attach_uprobe with 6 arguments, but the
C function takes a 7th, ref_ctr_offset: every uprobe bcc's attach_uprobe()
makes gets stack garbage as a reference-counter offset. The kernel then
increments a 16-bit "semaphore" at that offset in the traced process's
mapping of the library, and refuses other probes at the same address with a
different offset (EINVAL, "ref_ctr_offset mismatch" in dmesg). We pass 0.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any


@functools.cache
def _attach_uprobe() -> Any:
    """libbcc's bpf_attach_uprobe through our own handle: its function objects
    carry our argtypes, bcc's keep theirs. Opened at the first attach (bcc
    has opened the library by then), not when cudaprobe starts."""
    f = ctypes.CDLL("libbcc.so.0", use_errno=True).bpf_attach_uprobe
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
                  ctypes.c_uint64, ctypes.c_int, ctypes.c_uint32]
    return f


def attach(bpf: Any, fn_name: str, path: str, addr: int, retprobe: bool) -> None:
    """Attach program `fn_name` at `addr` of `path`; bpf.cleanup() detaches it."""
    fn = bpf.load_func(fn_name.encode(), bpf.KPROBE)
    ev_name = bpf._get_uprobe_evname(b"r" if retprobe else b"p", path.encode(), addr, -1)
    fd = _attach_uprobe()(fn.fd, 1 if retprobe else 0, ev_name, path.encode(), addr, -1, 0)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err) if err else "bpf_attach_uprobe failed")
    bpf._add_uprobe_fd(ev_name, fd)
