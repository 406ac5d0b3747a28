"""The GPU-time library attached in this process (its attach function called
as cudaprobe's stub calls it, with a stand-in libcupti), asked for the calls'
ties from CUPTI's callbacks (MODE ties) or for CUPTI's API records (MODE
calls); heartbeats for two of the library's flushes, then its stop. Prints
one JSON object: the file's header's api_records, how many records of each
type and what the DROPPED records count, and the first 50 records' fields
(type, correlation, tid, cbid, domain, start, end, text), read from a copy of
the records' descriptor taken at the attach.

With PAUSE (`pause`), first what serve --duty does at a slice's edges: the
recording paused (`paused` written, the watcher's `applied` awaited), one
launch of the stand-in CUPTI's (fake_cupti_launch, correlation 1000), the
recording resumed, another launch (1001).

Usage: call_ties_workload.py LIBRARY LIBCUPTI INJECT_H ties|calls [pause]
"""

import ctypes
import json
import os
import struct
import sys
import time

import library_here

HEADER = struct.Struct("<8sIIIIqII")
RECORD = struct.Struct("<HHIQQQIIIIIIBB6x")
library, cupti, header, mode = sys.argv[1:5]
layout, attach = library_here.load(library, header)
owner = os.getpid() | (layout["ATTACH_CALL_TIES"] if mode == "ties" else 0)
control = attach(cupti.encode(), owner, 1)


def field(offset, ctype):
    return ctype.from_address(control + offset)


state, heartbeat = field(layout["C_STATE"], ctypes.c_uint32), field(layout["C_HEARTBEAT"],
                                                                     ctypes.c_uint64)
if state.value != layout["ATTACH_RECORDING"]:
    print(json.dumps({"refused": state.value}))
    sys.exit(1)
records = os.dup(field(layout["C_FD"], ctypes.c_int32).value)


def follow(paused: int) -> None:
    """The recording paused (1) or resumed (0), as serve's slices ask."""
    field(layout["C_PAUSED"], ctypes.c_uint32).value = paused
    while field(layout["C_APPLIED"], ctypes.c_uint32).value != paused:
        heartbeat.value += 1
        time.sleep(0.01)


if sys.argv[5:] == ["pause"]:
    launch = ctypes.CDLL(cupti).fake_cupti_launch
    launch.argtypes = [ctypes.c_int, ctypes.c_uint64]
    for paused in (1, 0):
        follow(paused)
        launch(0, 1000)  # CUPTI_API_ENTER
        launch(1, 1000)  # CUPTI_API_EXIT
end = time.monotonic() + 2.5 * layout["FLUSH_PERIOD_MS"] / 1000
while time.monotonic() < end:
    heartbeat.value += 1
    time.sleep(0.05)
field(layout["C_STOP"], ctypes.c_uint32).value = 1
while state.value != layout["ATTACH_STOPPED"]:
    heartbeat.value += 1
    time.sleep(0.05)
data = os.pread(records, os.fstat(records).st_size, 0)
api_records = HEADER.unpack_from(data)[7]
out, pos, counts, dropped = [], HEADER.size, {}, 0
while pos + RECORD.size <= len(data):
    (kind, size, corr, start, stop, nbytes, _, _, _, tid, cbid, _, domain, _) = \
        RECORD.unpack_from(data, pos)
    counts[kind] = counts.get(kind, 0) + 1
    dropped += nbytes if kind == 8 else 0  # DROPPED
    if len(out) < 50:
        text = data[pos + RECORD.size:pos + size].rstrip(b"\0").decode()
        out.append({"type": kind, "correlation": corr, "tid": tid, "cbid": cbid,
                    "domain": domain, "start": start, "end": stop, "text": text})
    pos += size
print(json.dumps({"api_records": api_records, "counts": counts, "dropped": dropped,
                  "records": out}))
