"""uprobe_multi BPF links (Linux >= 6.6) through the raw bpf() syscall.

bcc 0.26 attaches one perf event per uprobe, and the kernel waits for an RCU
grace period as each one is destroyed: ~100 ms per probe, over 10 s to detach
the catalogue. A uprobe_multi link attaches one program at many offsets of one
file, each with a cookie (our probe id), and is released with one wait.
"""

from __future__ import annotations

import ctypes
import os
import struct

from cudaprobe.targets.environment import kernel_version

SYS_BPF = 321  # x86-64
BPF_LINK_CREATE = 28
BPF_TRACE_UPROBE_MULTI = 48
BPF_F_UPROBE_MULTI_RETURN = 1
_ATTR_SIZE = 128

# the GIL let go through the call (a link takes 1 to 100 ms): the thread that
# seizes a child held in its fork (forkhold.py) runs meanwhile. A child held at
# its open (opengate.py) or in its fork waits for its links whatever they take
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def supported() -> bool:
    """uprobe_multi links exist from Linux 6.6 on."""
    return kernel_version() >= (6, 6)


def create_link(prog_fd: int, path: str, offsets: list[int], cookies: list[int],
                retprobe: bool, pid: int = 0) -> int:
    """Attach `prog_fd` at `offsets` (file offsets) of `path`; returns the link fd.
    With `pid`, only that process (all its threads) hits the probes: the kernel
    puts no breakpoint in any other process's memory."""
    n = len(offsets)
    c_path = ctypes.create_string_buffer(path.encode())
    c_offsets = (ctypes.c_uint64 * n)(*offsets)
    c_cookies = (ctypes.c_uint64 * n)(*cookies)
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    # union bpf_attr.link_create: prog_fd, target_fd, attach_type, flags, then
    # .uprobe_multi = {path, offsets, ref_ctr_offsets, cookies, cnt, flags, pid}
    struct.pack_into("<IIII", attr, 0, prog_fd, 0, BPF_TRACE_UPROBE_MULTI, 0)
    struct.pack_into("<QQQQIII", attr, 16, ctypes.addressof(c_path),
                     ctypes.addressof(c_offsets), 0, ctypes.addressof(c_cookies), n,
                     BPF_F_UPROBE_MULTI_RETURN if retprobe else 0, pid)
    fd = _libc.syscall(SYS_BPF, BPF_LINK_CREATE, attr, _ATTR_SIZE)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd
