"""The safe point of the GPU-time injection: a small BPF program of its own
(bpf/safepoint.bpf.c), attached to CUDA call entries in one process for the
few seconds of an injection, that counts which threads make CUDA calls and
stops a thread cudaprobe has seized at the entry of its next one, with a
signal (bpf_send_signal_thread). It is apart from the trace's program so that
the trace's probes, maps and event layout know nothing of it.
"""

from __future__ import annotations

from typing import Any

from cudaprobe.probe import perf_uprobe
from cudaprobe.probe.bpfprog import SAFEPOINT, Settings, bpf_dir, safepoint_numbers
from cudaprobe.probe.load import import_bcc
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


class SafePoint:
    """`with SafePoint(pid, libraries, inside) as sp`: probes on; closed, gone."""

    def __init__(self, pid: int, libraries: list[OpenedFile],
                 inside: list[tuple[int, int]]) -> None:
        self.pid = pid
        self.libraries = libraries  # the process's libcudart/libcuda, opened through its maps
        self.inside = inside[:NUMBERS["CP_MAX_RANGES"]]  # executable ranges of the CUDA libraries
        self._bpf: Any = None
        self.probes = 0

    def __enter__(self) -> SafePoint:
        bcc = import_bcc()
        cflags = [f"-D{k}={v}" for k, v in NUMBERS.items()] + [f"-DCP_PID={self.pid}"]
        self._bpf = bcc.BPF(src_file=str(bpf_dir() / SAFEPOINT).encode(), cflags=cflags)
        try:
            ranges = self._bpf["inside"]
            for i, (lo, hi) in enumerate(self.inside):
                ranges[ranges.Key(i)] = ranges.Leaf(lo, hi)
            for library in self.libraries:
                offsets = read_symbols(library).functions
                # perf_uprobe's attach, not bcc's: it passes bcc's missing argument. In
                # every process (a perf event given a pid watches that thread alone):
                # the program keeps to CP_PID's. Through the descriptor: the name is
                # the process's to re-point
                for offset in sorted({offsets[n] for n in ENTRY_POINTS if n in offsets}):
                    perf_uprobe.attach(self._bpf, "on_entry", library.proc_path, offset, False)
                    self.probes += 1
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._bpf is not None:
            self._bpf.cleanup()
            self._bpf = None

    def busiest_threads(self) -> list[int]:
        """Threads that made CUDA calls since the probes went on, most calls first."""
        seen = self._bpf["seen"]
        counts = [(v.value, k.value) for k, v in seen.items()]
        return [tid for _, tid in sorted(counts, reverse=True)]

    def arm(self, tid: int, signal: int) -> None:
        armed = self._bpf["armed"]
        armed[armed.Key(tid)] = armed.Leaf(signal)

    def disarm(self, tid: int) -> None:
        armed = self._bpf["armed"]
        try:
            del armed[armed.Key(tid)]
        except KeyError:
            pass

    def signalled_at(self, tid: int) -> int | None:
        """The probe address at which `tid` was sent the signal, if it was."""
        done = self._bpf["signalled"]
        try:
            return done[done.Key(tid)].value
        except KeyError:
            return None
