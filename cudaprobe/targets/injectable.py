"""Whether the GPU-time library may be injected into a running process, and
what the injection needs to know about it: each refusal is one line (why),
said by the caller, who traces on without GPU time.

A process is refused when ptrace cannot or should not touch it (Yama's
ptrace_scope 3, a seccomp filter on every thread, which the injected code's
system calls could trip, a debugger or another cudaprobe already attached),
when it is a zombie, or when it maps no CUDA library. A thread is usable when
it has no seccomp filter of its own and neither catches nor blocks the stop
signal, one of those whose default is to be ignored, so that a signal left
over by a cudaprobe that was killed does nothing.
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass

from cudaprobe.errors import LibraryNotFound, ProcessGone
from cudaprobe.targets.environment import status_field
from cudaprobe.targets.inject import Mapping
from cudaprobe.targets.jobs import environment
from cudaprobe.targets.openfile import OpenedFile
from cudaprobe.targets.procmaps import read_maps

# default action: ignore; SIGCHLD last, as a program may wait for children with it
STOP_SIGNALS = (signal.SIGWINCH, signal.SIGURG, signal.SIGCHLD)
CUDA_LIBRARY = re.compile(r"/lib(cuda|cudart)\.so[\d.]*$")
# a caller in one of these is CUDA calling itself: its entry is no safe point
CUDA_CODE = re.compile(r"/lib(cu|nv|nccl)[^/]*\.so[^/]*$")
CUPTI = re.compile(r"/libcupti\.so[\d.]*$")
YAMA = "/proc/sys/kernel/yama/ptrace_scope"
SECCOMP_WHY = "which the injected code's system calls (memfd_create, tgkill, mmap) could trip"


def yama_scope() -> str:
    """Yama's ptrace_scope ("3": no ptrace at all), or "" where there is no Yama."""
    try:
        with open(YAMA) as f:
            return f.read().strip()
    except OSError:
        return ""


def refusal(pid: int, ours: bool = False) -> str:
    """Why the process may not be injected into ("" if it may). `ours`: a
    tracer that is cudaprobe itself (a child it seized at its open) is no
    reason."""
    state = status_field("State", pid)
    if state is None:
        return "it has exited"
    if state.startswith("Z"):
        return "it is a zombie"
    if state.startswith(("T", "t")) and not ours:  # (ours: stopped by us, at the safe point)
        return ("it is stopped (SIGSTOP, job control or a debugger): no thread of it can reach "
                "a CUDA call, where the library is loaded; it runs on untouched")
    if yama_scope() == "3":
        return "ptrace is disabled on this machine (Yama ptrace_scope is 3)"
    tids = threads(pid)
    mine = {str(tid) for tid in threads(os.getpid())} if ours else set()  # a tracer is a thread
    if tids and all(under_seccomp(pid, tid) for tid in tids):
        return f"it runs under a seccomp filter, {SECCOMP_WHY}"
    for tid in tids:
        tracer = status_field("TracerPid", f"{pid}/task/{tid}")
        if tracer not in (None, "0") and tracer not in mine:
            return f"it is already traced by pid {tracer} (a debugger, or another cudaprobe)"
    return ""


def under_seccomp(pid: int, tid: int) -> bool:
    """The thread itself runs under seccomp (a filter or strict mode), or is gone:
    seccomp is a thread's, and a thread may put a filter on itself alone, so the
    main thread's says nothing of the one the stub would run in."""
    return status_field("Seccomp", f"{pid}/task/{tid}") != "0"


def threads(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def _mask(pid: int, tid: int, name: str) -> int:
    value = status_field(name, f"{pid}/task/{tid}")
    return int(value, 16) if value else -1


def stop_signal(pid: int, tid: int) -> int:
    """A signal the thread neither catches nor blocks (0: none)."""
    caught, blocked = _mask(pid, tid, "SigCgt"), _mask(pid, tid, "SigBlk")
    if caught < 0 or blocked < 0:
        return 0
    for sig in STOP_SIGNALS:
        bit = 1 << (int(sig) - 1)
        if not (caught | blocked) & bit:
            return int(sig)
    return 0


@dataclass
class CudaView:
    """What the process maps of CUDA."""
    libraries: list[OpenedFile]  # libcuda/libcudart as mapped, for the safe-point probes
    inside: list[tuple[int, int]]  # executable ranges of every CUDA library
    cupti: str  # a libcupti it maps (its own path), or ""


def cuda_view(pid: int, maps: list[Mapping]) -> CudaView:
    libraries: dict[str, OpenedFile] = {}
    mapped = {f.path: f for f in read_maps(pid)}
    inside, cupti = [], ""
    for m in maps:
        if "x" not in m.perms:
            continue
        path = m.path.removesuffix(" (deleted)")
        if CUDA_CODE.search(path):
            inside.append((m.start, m.end))
        if CUDA_LIBRARY.search(path) and path not in libraries and path in mapped:
            try:  # through the mapping: the name is the process's to re-point
                libraries[path] = mapped[path].open()
            except (LibraryNotFound, ProcessGone):
                continue
        if CUPTI.search(path) and not cupti:
            cupti = path
    return CudaView(list(libraries.values()), inside, cupti)


# in a process's environment, not empty or 0: serve on a node puts no GPU-time
# library into it (it will run torch.profiler, Nsight or another CUPTI client,
# which find CUPTI taken once the library holds it)
OPT_OUT = "CUDAPROBE_NO_GPU_TIME"
OPTED_OUT = (f"its environment has {OPT_OUT} (a program that runs torch.profiler or another "
             "CUPTI client, which would find CUPTI taken): it runs on untouched")


# GPU tools that use CUPTI or the profiling counters themselves: serve on a
# node puts no GPU-time library into them (DCGM's host engine and exporter,
# Nsight Systems and Compute, nvidia-smi)
GPU_TOOLS = frozenset((b"nv-hostengine", b"dcgm-exporter", b"dcgmi", b"nsys", b"ncu",
                       b"nvidia-smi", b"nsys-launcher"))


def opted_out(environ: bytes, comm: bytes = b"") -> str:
    """Why a process is left without the GPU-time library on a node, from its
    environment block and its name (/proc/PID/comm); "" if it is not."""
    if comm.strip() in GPU_TOOLS:
        return (f"it is {comm.strip().decode()}, a GPU tool that uses CUPTI or the GPU's "
                "counters itself: it runs on untouched")
    if environment(environ).get(OPT_OUT.encode(), b"0") not in (b"", b"0"):
        return OPTED_OUT
    return ""


# why a process got no GPU time, as a bounded metric label (serve): the first
# rule with a phrase in the line said
REFUSAL_REASONS = (
    ("opted_out", (OPT_OUT, "a GPU tool that uses CUPTI")),
    ("exited", ("it has exited", "it is a zombie")),
    ("ptrace_denied", ("ptrace is disabled", "ptrace is not allowed")),
    ("traced", ("already traced",)),
    ("stopped", ("it is stopped",)),
    ("seccomp", ("seccomp",)),
    ("no_cuda", ("maps no CUDA library",)),
    ("other_cudaprobe", ("another cudaprobe", "recording for cudaprobe")),
    ("cupti", ("CUPTI", "libcupti")),
    ("no_cuda_call", ("entered a CUDA call within", "define none of the calls")),
    ("c_library", ("C library", "dlopen", "dlerror", "loader")),
    ("busy", ("processes are waiting for the GPU-time library",)),
)


def refusal_reason(why: str) -> str:
    """The reason's label: one of REFUSAL_REASONS, or `other`."""
    for reason, phrases in REFUSAL_REASONS:
        if any(p in why for p in phrases):
            return reason
    return "other"
