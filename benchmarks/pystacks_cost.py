"""Per-call cost of --py-stacks beside the plain trace, on the CPU machine:
a Python loop calling libcudart's cudaRuntimeGetVersion through ctypes from
a stack DEPTH frames deep, N calls timed in the process, untraced, under
`cudaprobe trace` and under `cudaprobe trace --py-stacks`, ROUNDS rounds
interleaved; and both with --errors-only, where no row is made (the calls
succeed): the probes' own cost. Prints one JSON line per run, then the medians and the cost a
call (ns) of each beside untraced.

    sudo python benchmarks/pystacks_cost.py [--calls 200000] [--depth 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from cudaprobe.probe.bpfprog import bpf_dir

LIBCUDART = "/usr/local/cuda/lib64/libcudart.so"
WORKLOAD = r"""
import ctypes, json, sys, time
lib = ctypes.CDLL(sys.argv[1])
n, depth = int(sys.argv[2]), int(sys.argv[3])
v = ctypes.c_int()
f = lib.cudaRuntimeGetVersion
def loop(d):
    if d:
        return loop(d - 1)
    for _ in range(1000):
        f(ctypes.byref(v))
    start = time.perf_counter()
    for _ in range(n):
        f(ctypes.byref(v))
    return time.perf_counter() - start
print(json.dumps({"ns_per_call": loop(depth) / n * 1e9}))
"""


def run(argv: list[str]) -> float:
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return json.loads([line for line in out.splitlines() if line.startswith('{"ns')][-1])[
        "ns_per_call"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python", default="/usr/bin/python3.11")
    args = ap.parse_args()
    assert bpf_dir()
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "loop.py")
        with open(script, "w") as f:
            f.write(WORKLOAD)
        cmd = [args.python, script, LIBCUDART, str(args.calls), str(args.depth)]
        trace = [sys.executable, "-m", "cudaprobe", "trace", "-e", "cudaRuntimeGetVersion",
                 "--lib", LIBCUDART, "-o", os.path.join(d, "t.jsonl"), "--force"]
        configs = {"untraced": cmd, "trace": [*trace, "--", *cmd],
                   "trace --py-stacks": [*trace, "--py-stacks", "--", *cmd],
                   # no row to decode (the calls succeed): the probes' cost, and the
                   # stack records' spooling and parsing, without the rows'
                   "trace --errors-only": [*trace, "--errors-only", "--", *cmd],
                   "trace --errors-only --py-stacks": [*trace, "--errors-only", "--py-stacks",
                                                       "--", *cmd]}
        results: dict[str, list[float]] = {k: [] for k in configs}
        for r in range(args.rounds):
            for name, argv in configs.items():
                results[name].append(run(argv))
                print(json.dumps({"round": r + 1, "config": name,
                                  "ns_per_call": round(results[name][-1], 1)}), flush=True)
    base = statistics.median(results["untraced"])
    for name, values in results.items():
        med = statistics.median(values)
        print(f"{name}: median {med:.0f} ns a call, +{med - base:.0f} ns beside untraced")


if __name__ == "__main__":
    main()
