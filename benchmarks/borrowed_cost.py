"""What borrowed stacks (--py-stacks) cost, on the CPU machine, ROUNDS rounds
interleaved:

- wakeups outside the trace: two processes that are not traced ping-pong a
  byte over pipes (two wakeups a round trip), alone, beside `cudaprobe trace`
  of a Python process and beside `cudaprobe trace --py-stacks` of it (whose
  sched_waking and sched_wakeup_new programs then run at every wakeup of the
  machine);
- a call of a thread with no Python frame: a thread that a ctypes call makes
  and joins (tests/workloads/borrowed_pool.c's worker_calls) calls
  cudaDriverGetVersion N times, timed in the process, under `cudaprobe trace`
  and under `cudaprobe trace --py-stacks` (each call then walks the thread
  list and borrows the waiting caller's stack).

Prints one JSON line per run, then the medians.

    sudo python benchmarks/borrowed_cost.py [--trips 50000] [--calls 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

LIBCUDART = "/usr/local/cuda/lib64/libcudart.so"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POOL_SOURCE = os.path.join(REPO, "tests", "workloads", "borrowed_pool.c")
EVENTS = ["-e", "cudaRuntimeGetVersion,cudaDriverGetVersion", "--lib", LIBCUDART]

PING = r"""
import os, sys, time
n = int(sys.argv[1])
a_r, a_w = os.pipe()
b_r, b_w = os.pipe()
if os.fork() == 0:
    for _ in range(n):
        os.read(a_r, 1)
        os.write(b_w, b"x")
    os._exit(0)
start = time.perf_counter()
for _ in range(n):
    os.write(a_w, b"x")
    os.read(b_r, 1)
print((time.perf_counter() - start) / n * 1e9)
os.wait()
"""

# a traced Python process: one call (its interpreter found), then it waits
IDLE = r"""
import ctypes, sys
ctypes.CDLL(sys.argv[1]).cudaRuntimeGetVersion(ctypes.byref(ctypes.c_int()))
print("ready", flush=True)
sys.stdin.readline()
"""

WORKER = r"""
import ctypes, sys, time
pool = ctypes.CDLL(sys.argv[1])
n = int(sys.argv[2])
pool.worker_calls(1000)
start = time.perf_counter()
pool.worker_calls(n)
print((time.perf_counter() - start) / n * 1e9)
"""


def cudaprobe(*args: str) -> list[str]:
    return [sys.executable, "-m", "cudaprobe", "trace", "-o", os.devnull, *args]


def ping(trips: int) -> float:
    out = subprocess.run([sys.executable, "-c", PING, str(trips)], capture_output=True,
                         text=True, check=True).stdout
    return float(out)


def ping_beside(trips: int, *flags: str) -> float:
    """ping's round trip while cudaprobe traces another Python process"""
    trace = subprocess.Popen(cudaprobe(*flags, *EVENTS, "--", sys.executable, "-c", IDLE,
                                       LIBCUDART),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    try:
        assert trace.stdout.readline().strip() == "ready"
        return ping(trips)
    finally:
        trace.stdin.write("\n")
        trace.stdin.close()
        trace.wait(timeout=60)


def worker(pool: str, calls: int, *flags: str) -> float:
    out = subprocess.run(cudaprobe(*flags, *EVENTS, "--", sys.executable, "-c", WORKER, pool,
                                   str(calls)),
                         capture_output=True, text=True, check=True, cwd=REPO).stdout
    return float(out.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trips", type=int, default=50000)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    pool = os.path.join(tempfile.mkdtemp(), "libborrowed_pool.so")
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-I/usr/local/cuda/include", "-o", pool,
                    POOL_SOURCE, "-L/usr/local/cuda/lib64", "-lcudart", "-lpthread",
                    "-Wl,-rpath,/usr/local/cuda/lib64"], check=True)
    runs: dict[str, list[float]] = {}
    for r in range(a.rounds):
        for name, run in (
                ("ping alone", lambda: ping(a.trips)),
                ("ping beside trace", lambda: ping_beside(a.trips)),
                ("ping beside trace --py-stacks", lambda: ping_beside(a.trips, "--py-stacks")),
                ("worker call, trace", lambda: worker(pool, a.calls)),
                ("worker call, trace --py-stacks", lambda: worker(pool, a.calls,
                                                                  "--py-stacks"))):
            ns = run()
            runs.setdefault(name, []).append(ns)
            print(json.dumps({"round": r, "run": name, "ns": round(ns, 1)}), flush=True)
            time.sleep(0.5)
    print(json.dumps({name: {"median_ns": round(statistics.median(v), 1),
                             "min_ns": round(min(v), 1)} for name, v in runs.items()}))


if __name__ == "__main__":
    main()
