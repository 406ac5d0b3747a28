"""The GPU-time library attached in this process (its attach function called
as cudaprobe's stub calls it, with the stand-in libcupti), stopped, and what
becomes of CUPTI after each stop, step by step. The process's "CUDA calls"
are the stand-in CUPTI's fake_cupti_launch() at a call's entry and exit, as
the real runtime has CUPTI's callbacks called.

STEPS, one word each, in order:
  attach   attach (MODE ties, calls or work; `keep`: ATTACH_KEEP_CUPTI),
           heartbeats until the records' memfd has a kernel record
  stop     stop, waited for (ATTACH_STOPPED)
  entry    a call's entry
  exit     a call's exit
  child    a forked child's call (entry and exit), the child's `detached`
           after it as its exit status
Prints one JSON object: after each step, the control block's `detached` and
`state` (and the child's `detached`), and each attach's kernel records.

Usage: cupti_detach_workload.py LIBRARY LIBCUPTI INJECT_H MODE[,keep] STEP...
"""

import ctypes
import json
import os
import sys
import time

import library_here

library, cupti, header, mode = sys.argv[1:5]
layout, attach = library_here.load(library, header)
launch = ctypes.CDLL(cupti).fake_cupti_launch
launch.argtypes = [ctypes.c_int, ctypes.c_uint64]
flags = {"ties": layout["ATTACH_CALL_TIES"], "work": layout["ATTACH_WORK_ONLY"], "calls": 0}
owner = os.getpid() | flags[mode.split(",")[0]] | (
    layout["ATTACH_KEEP_CUPTI"] if mode.endswith(",keep") else 0)
RECORD_SIZE = 64  # struct gputime_record (cupti/gputime.h)
HEADER_SIZE = 40  # struct gputime_header
control = 0
beat = 1


def u32(field: str) -> ctypes.c_uint32:
    return ctypes.c_uint32.from_address(control + layout[field])


def kernels(fd: int) -> int:
    """Kernel records (type 1) in the records' memfd so far."""
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    pos, n = HEADER_SIZE, 0
    while pos + RECORD_SIZE <= len(data):
        kind, size = int.from_bytes(data[pos:pos + 2], "little"), \
            int.from_bytes(data[pos + 2:pos + 4], "little")
        n += kind == 1
        pos += max(size, RECORD_SIZE)
    return n


def heartbeat() -> None:
    global beat
    beat += 1
    ctypes.c_uint64.from_address(control + layout["C_HEARTBEAT"]).value = beat


steps, seen = [], []
records = -1
for step in sys.argv[5:]:
    if step == "attach":
        control = attach(cupti.encode(), owner, beat)
        if u32("C_STATE").value != layout["ATTACH_RECORDING"]:
            why = ctypes.string_at(control + layout["C_WHY"]).decode(errors="replace")
            print(json.dumps({"refused": why, "steps": steps}))
            sys.exit(1)
        records = os.dup(ctypes.c_int32.from_address(control + layout["C_FD"]).value)
        while kernels(records) == 0:  # the watcher's flush hands over the fake's kernel
            heartbeat()
            time.sleep(0.05)
        seen.append(kernels(records))
    elif step == "stop":
        u32("C_STOP").value = 1
        while u32("C_STATE").value != layout["ATTACH_STOPPED"]:
            heartbeat()
            time.sleep(0.02)
        seen[-1] = kernels(records)
        os.close(records)
    elif step in ("entry", "exit"):
        launch(step == "exit", 1000)  # CUPTI_API_ENTER 0, CUPTI_API_EXIT 1
    elif step == "child":
        child = os.fork()
        if child == 0:
            launch(0, 1000)
            launch(1, 1000)
            os._exit(u32("C_DETACHED").value)
        _, status = os.waitpid(child, 0)
    steps.append({"step": step, "detached": u32("C_DETACHED").value,
                  "state": u32("C_STATE").value,
                  **({"child": os.waitstatus_to_exitcode(status)} if step == "child" else {})})
print(json.dumps({"steps": steps, "kernels": seen}))
