"""The safe point of the GPU-time injection: a small BPF program of its own
(bpf/safepoint.bpf.c), attached to CUDA call entries in a process for the
time of its injection, that counts which threads make CUDA calls and stops a
thread cudaprobe has seized at the entry of its next one, with a signal
(bpf_send_signal_thread). It is apart from the trace's program so that the
trace's probes, maps and event layout know nothing of it. With uprobe_multi,
it is compiled once a session (SafePointProgram) and each process gets links
of its own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from typing import Any

from cudaprobe.errors import ProcessGone
from cudaprobe.probe import perf_uprobe, uprobe_multi
from cudaprobe.probe.bpfprog import (
    SAFEPOINT,
    Settings,
    bpf_dir,
    default_attach,
    safepoint_numbers,
)
from cudaprobe.probe.load import import_bcc, load_text
from cudaprobe.targets.elfsyms import read_symbols
from cudaprobe.targets.openfile import OpenedFile

NUMBERS = safepoint_numbers(Settings(attach="perf"))

# calls a program makes often: one of them comes soon in a process at work
ENTRY_POINTS = (
    "cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchKernelExC", "cudaMemcpyAsync",
    "cudaMemcpy", "cudaMemsetAsync", "cudaMemset", "cudaStreamSynchronize",
    "cudaDeviceSynchronize", "cudaEventRecord", "cudaEventQuery", "cudaEventSynchronize",
    "cudaStreamWaitEvent", "cudaGetDevice", "cudaSetDevice", "cudaGetLastError",
    "cudaPeekAtLastError", "cudaStreamIsCapturing", "cudaGetDeviceCount", "cudaMalloc",
    "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cudaGraphLaunch",
    "cudaPointerGetAttributes", "cuLaunchKernel", "cuLaunchKernelEx", "cuCtxGetCurrent",
    "cuCtxSetCurrent", "cuStreamSynchronize", "cuCtxSynchronize", "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2", "cuMemcpyAsync", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
    "cuMemAlloc_v2", "cuMemFree_v2", "cuEventRecord", "cuEventQuery", "cuStreamQuery",
    "cuDeviceGet", "cuDeviceGetCount", "cuInit", "cuGraphLaunch", "cuMemsetD8_v2",
    "cuMemsetD32Async",
)


class SafePointProgram:
    """bpf/safepoint.bpf.c compiled once, for every process injected in a
    session: each gets uprobe_multi links of its own (no other process takes a
    trap). In perf mode (no uprobe_multi), None: each SafePoint compiles its
    own, whose perf events (in every process mapping the library; the program
    keeps to the processes in `inside`) its cleanup takes off."""

    def __init__(self) -> None:
        self._bpf: Any = None
        self._lock = threading.Lock()

    @staticmethod
    def for_this_kernel() -> SafePointProgram | None:
        return SafePointProgram() if default_attach() == "multi" else None

    def bpf(self) -> Any:
        with self._lock:
            if self._bpf is None:
                self._bpf = _compile()
            return self._bpf

    def close(self) -> None:
        with self._lock:
            if self._bpf is not None:
                self._bpf.cleanup()
                self._bpf = None


def _compile() -> Any:
    """The safe point's program: compiled, or from the cache (bpfcache.py)."""
    cflags = [f"-D{k}={v}" for k, v in NUMBERS.items()]
    return load_text(import_bcc(), (bpf_dir() / SAFEPOINT).read_bytes(), cflags)


class SafePoint:
    """`with SafePoint(pid, libraries, inside) as sp`: probes on; closed, gone.
    `inside` may be set later (set_inside): a process held at its first open
    of a CUDA library maps none yet, and every entry of it counts until then."""

    def __init__(self, pid: int, libraries: list[OpenedFile],
                 inside: list[tuple[int, int]],
                 program: SafePointProgram | None = None) -> None:
        self.pid = pid
        self.libraries = libraries  # libcudart/libcuda, opened by descriptor
        self.inside = inside
        self.program = program
        self._bpf: Any = None
        self._links: list[int] = []
        self.probes = 0

    def __enter__(self) -> SafePoint:
        self._bpf = self.program.bpf() if self.program is not None else _compile()
        try:
            self.set_inside(self.inside)
            for library in self.libraries:
                offsets = read_symbols(library).functions
                points = sorted({offsets[n] for n in ENTRY_POINTS if n in offsets})
                if points and self.program is not None:
                    fn = self._bpf.load_func(b"on_entry", self._bpf.KPROBE,
                                             attach_type=uprobe_multi.BPF_TRACE_UPROBE_MULTI)
                    try:
                        self._links.append(uprobe_multi.create_link(
                            fn.fd, library.proc_path, points, [0] * len(points), False,
                            self.pid))
                    except OSError as e:
                        if e.errno == errno.ESRCH:
                            raise ProcessGone(self.pid, "exited") from None
                        raise
                    self.probes += len(points)
                    continue
                # perf_uprobe's attach, not bcc's: it passes bcc's missing argument. In
                # every process (a perf event given a pid watches that thread alone):
                # the program keeps to the processes in `inside`. Through the
                # descriptor: the name is the process's to re-point
                for offset in points:
                    perf_uprobe.attach(self._bpf, "on_entry", library.proc_path, offset, False)
                    self.probes += 1
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_inside(self, inside: list[tuple[int, int]]) -> None:
        """The CUDA libraries' executable ranges in the process (its entry in
        `inside` is what makes the program watch it)."""
        self.inside = inside[:NUMBERS["CP_MAX_RANGES"]]
        table = self._bpf["inside"]
        leaf = table.Leaf()
        for i, (lo, hi) in enumerate(self.inside):
            leaf.lo[i], leaf.hi[i] = lo, hi
        table[table.Key(self.pid)] = leaf

    def close(self) -> None:
        for fd in self._links:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._links = []
        if self._bpf is None:
            return
        bpf, self._bpf = self._bpf, None
        if self.program is None:
            bpf.cleanup()
            return
        with contextlib.suppress(KeyError):
            del bpf["inside"][bpf["inside"].Key(self.pid)]
        seen = bpf["seen"]
        for key in [k for k in seen.keys() if k.value >> 32 == self.pid]:
            with contextlib.suppress(KeyError):
                del seen[key]

    def busiest_threads(self) -> list[int]:
        """The process's threads that made CUDA calls since the probes went on,
        most calls first."""
        seen = self._bpf["seen"]
        counts = [(v.value, k.value & 0xFFFFFFFF) for k, v in seen.items()
                  if k.value >> 32 == self.pid]
        return [tid for _, tid in sorted(counts, reverse=True)]

    def arm(self, tid: int, signal: int) -> None:
        armed = self._bpf["armed"]
        armed[armed.Key(tid)] = armed.Leaf(signal)

    def disarm(self, tid: int) -> None:
        armed = self._bpf["armed"]
        with contextlib.suppress(KeyError):
            del armed[armed.Key(tid)]
        signalled = self._bpf["signalled"]
        with contextlib.suppress(KeyError):
            del signalled[signalled.Key(tid)]

    def signalled_at(self, tid: int) -> int | None:
        """The probe address at which `tid` was sent the signal, if it was."""
        done = self._bpf["signalled"]
        try:
            return done[done.Key(tid)].value
        except KeyError:
            return None
