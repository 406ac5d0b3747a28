"""A Python program for serve --gpu-time --py-stacks where there is no GPU:
it calls cudaLaunchKernel of the stand-in runtime (gputime_fake_cudart.c,
through ctypes: it fails as without a driver, and is traced all the same)
from two lines of its own, and for each call writes what cupti/gputime.c
would have written had a GPU run it: the API record (this thread's tid, the
CPU interval the runtime read inside the call) and a kernel record, to
$CUDAPROBE_GPUTIME_DIR, in the layout decode/gputime.py mirrors.

The kernels of `heavy()` run 10,000 + i ns, those of `light()` 3,000 ns.
It prints each line's total GPU ns (its own figures, for the test to hold
the metric to), then waits for its standard input to close.

Usage: gpulines_workload.py LIBCUDART HEAVY LIGHT [wait|threads]
  wait: first heavy() again and again until a line comes on standard input
  threads: heavy() and light() at once, each on a thread of its own
"""

import ctypes
import os
import select
import struct
import sys
import threading

HEADER = struct.Struct("<8sIIIIqII")
RECORD = struct.Struct("<HHIQQQIIIIIIBB6x")
KERNEL, API, NAME, FUNCTION = 1, 4, 5, 6
CLOCK_MONOTONIC, RUNTIME_DOMAIN, LAUNCH_CBID = 1, 5, 211


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


runtime = ctypes.CDLL(sys.argv[1])
runtime.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p,
                                     ctypes.c_size_t, ctypes.c_void_p]
interval = runtime.gputime_fake_api_interval
interval.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64)]
out = os.open(os.path.join(os.environ["CUDAPROBE_GPUTIME_DIR"], f"gputime.fake-{os.getpid()}.bin"),
              os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
totals = {"heavy": 0, "light": 0}
correlation = 0
lock = threading.Lock()  # one record at a time into the file, one correlation id each


def record(kind, text=b"", **fields):
    body = text + b"\0" if text else b""
    body += b"\0" * (-len(body) % 8)
    values = {**dict.fromkeys(("correlation", "start", "end", "bytes", "device", "context",
                               "stream", "tid", "cbid", "name_id", "domain", "copy_kind"), 0),
              **fields}
    os.write(out, RECORD.pack(kind, RECORD.size + len(body), values["correlation"],
                              values["start"], values["end"], values["bytes"], values["device"],
                              values["context"], values["stream"], values["tid"], values["cbid"],
                              values["name_id"], values["domain"], values["copy_kind"]) + body)


def launched(who, ns):
    """After a launch: its API record, and its kernel's, `ns` long."""
    global correlation
    start, end = ctypes.c_uint64(), ctypes.c_uint64()
    interval(ctypes.byref(start), ctypes.byref(end))  # this thread's last call's
    with lock:
        correlation += 1
        record(API, correlation=correlation, start=start.value, end=end.value,
               tid=threading.get_native_id(), cbid=LAUNCH_CBID, domain=RUNTIME_DOMAIN)
        record(KERNEL, correlation=correlation, start=end.value + 2000,
               end=end.value + 2000 + ns, context=1, stream=7, name_id=1)
        totals[who] += ns


def heavy(i):
    runtime.cudaLaunchKernel(None, Dim3(1, 1, 1), Dim3(32, 1, 1), None, 0, None)
    launched("heavy", 10_000 + i)


def light():
    runtime.cudaLaunchKernel(None, Dim3(1, 1, 1), Dim3(32, 1, 1), None, 0, None)
    launched("light", 3_000)


os.write(out, HEADER.pack(b"CPGPUT1\0", 3, os.getpid(), CLOCK_MONOTONIC, RECORD.size, 0, 1, 1))
record(FUNCTION, b"cudaLaunchKernel_v7000", cbid=LAUNCH_CBID, domain=RUNTIME_DOMAIN)
record(NAME, b"_Z11line_kernelv", name_id=1)
if sys.argv[4:] == ["wait"]:  # heavy() until a line comes on stdin
    i = 0
    while not select.select([sys.stdin], [], [], 0)[0]:
        heavy(i)
        i += 1
    sys.stdin.readline()
if sys.argv[4:] == ["threads"]:  # heavy() and light() at once, each on a thread of its own
    threads = [threading.Thread(target=lambda: [heavy(i) for i in range(int(sys.argv[2]))]),
               threading.Thread(target=lambda: [light() for _ in range(int(sys.argv[3]))])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
else:
    for i in range(int(sys.argv[2])):
        heavy(i)
    for _ in range(int(sys.argv[3])):
        light()
os.close(out)
print(f"heavy {totals['heavy']} light {totals['light']}", flush=True)
sys.stdin.read()
