"""Attach/detach cycles in one process (part of the soak test, benchmarks/soak.py):
after N cycles of the Tracer that every session uses (compile, attach to
libcudart, read a workload's calls, detach, close), no file descriptor is left
open and none of the BPF programs, maps and links the cycles made is left in
the kernel.

Each cycle records the kernel ids of the BPF objects it holds (from
/proc/self/fdinfo); at the end each id is looked up with the bpf(2) syscall
(BPF_*_GET_FD_BY_ID): ENOENT means freed. Ids, not a count of the machine's
objects, so other tracers running meanwhile do not count.
"""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import time
from pathlib import Path

from cudaprobe.catalogue.functions import RUNTIME
from cudaprobe.probe.bpfprog import Settings
from cudaprobe.probe.plan import plan_probes, select_functions
from cudaprobe.probe.tracer import Tracer

SYS_BPF = 321  # x86-64
GET_FD_BY_ID = {"prog": 13, "map": 14, "link": 30}
FD_KIND = {"anon_inode:bpf-prog": "prog", "anon_inode:bpf-map": "map",
           "anon_inode:bpf_link": "link"}
LOOPS = 10  # the workload's loops per cycle: 3 calls each


def open_fds() -> dict[int, str]:
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # listdir's own descriptor, closed by now
    return fds


def bpf_objects() -> set[tuple[str, int]]:
    """(kind, kernel id) of every BPF program, map and link this process holds."""
    found = set()
    for fd, target in open_fds().items():
        kind = FD_KIND.get(target)
        if kind is None:
            continue
        try:
            info = Path(f"/proc/self/fdinfo/{fd}").read_text()
        except OSError:
            continue
        for line in info.splitlines():
            if line.startswith(f"{kind}_id:"):
                found.add((kind, int(line.split()[1])))
    return found


def still_in_kernel(kind: str, object_id: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    attr = (ctypes.c_uint32 * 32)(object_id)
    fd = libc.syscall(SYS_BPF, GET_FD_BY_ID[kind], ctypes.byref(attr), ctypes.sizeof(attr))
    if fd >= 0:
        os.close(fd)
        return True
    if ctypes.get_errno() != errno.ENOENT:
        raise OSError(ctypes.get_errno(), f"bpf GET_FD_BY_ID {kind} {object_id}")
    return False


def cycles(count: int, libcudart: str, workload: Path) -> dict:
    plan = plan_probes(select_functions(["cudaGetDeviceCount", "cudaMalloc", "cudaFree"],
                                        {RUNTIME}), [libcudart])
    before = open_fds()
    made: set[tuple[str, int]] = set()
    seen_calls = []
    start = time.monotonic()
    for _ in range(count):
        with Tracer(plan, Settings()) as tracer:
            tracer.attacher.start()
            made |= bpf_objects()
            subprocess.run([str(workload), str(LOOPS), "0", "0"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            calls = 0
            deadline = time.monotonic() + 5
            while calls < 3 * LOOPS and time.monotonic() < deadline:
                calls += len(tracer.ring.poll(50))
            seen_calls.append(calls)  # system-wide: other programs' calls too
            tracer.attacher.detach()
    elapsed = time.monotonic() - start
    after = open_fds()
    left = made
    deadline = time.monotonic() + 10  # objects are freed after an RCU grace period
    while left and time.monotonic() < deadline:
        left = {o for o in left if still_in_kernel(*o)}
        time.sleep(0.2)
    return {
        "cycles": count, "seconds": round(elapsed, 1),
        "calls_read_per_cycle_min": min(seen_calls),
        "fds_before": len(before), "fds_after": len(after),
        "fds_left_open": sorted(f"{fd} -> {t}" for fd, t in after.items() if fd not in before),
        "bpf_objects_made": {k: sum(1 for o in made if o[0] == k) for k in GET_FD_BY_ID},
        "bpf_objects_left": sorted(f"{k} {i}" for k, i in left),
    }
