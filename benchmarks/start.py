"""How long a trace takes from start to exit around a program that makes no
call, beside bpftrace with one probe: `bpftrace -e 'uprobe:LIB:cudaMalloc {}'
-c /bin/true` against `cudaprobe trace --force -o FILE -- /bin/true`, with the
compiled program in the cache (a second start) and with an empty cache (bcc
compiles it: a first start, and every start before the cache). Wall time,
start to exit, of each in turn, round by round (the order turns each round),
so that a shared machine's load falls on all alike. With OLD, a source tree
of an earlier cudaprobe (`git archive REV | tar -x -C OLD`), its start too.
Prints each round as a JSON line, then each one's median and its ratio to
bpftrace's.

    sudo python benchmarks/start.py [--rounds 9] [--old /tmp/old] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

LIB = "/usr/local/cuda/lib64/libcudart.so"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def wall(argv: list[str], env: dict[str, str], cwd: str) -> float:
    """Seconds from start to exit; the command must succeed."""
    start = time.monotonic()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    took = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]}... failed ({done.returncode}): {done.stderr[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--old", help="a source tree of an earlier cudaprobe, timed too")
    ap.add_argument("--lib", default=LIB)
    ap.add_argument("--json", help="write every round and the medians here")
    args = ap.parse_args()
    bpftrace = shutil.which("bpftrace")
    if bpftrace is None:
        raise SystemExit("bpftrace is not on PATH")
    with tempfile.TemporaryDirectory(prefix="cudaprobe-start-") as d:
        out = os.path.join(d, "t.jsonl")
        trace = [sys.executable, "-m", "cudaprobe", "trace", "--force", "-o", out, "--",
                 "/bin/true"]
        warm = os.path.join(d, "warm-cache")

        def env(tree: str, cache: str) -> dict[str, str]:
            # the tree first; what the environment had after it (bcc's, on the GPU host)
            path = os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH")) if p)
            return {**os.environ, "PYTHONPATH": path, "CUDAPROBE_CACHE": cache}

        def cold() -> float:
            cache = tempfile.mkdtemp(prefix="cold-", dir=d)
            return wall(trace, env(HERE, cache), d)

        runs = {
            "bpftrace": lambda: wall([bpftrace, "-e", f"uprobe:{args.lib}:cudaMalloc {{}}",
                                      "-c", "/bin/true"], dict(os.environ), d),
            "cached": lambda: wall(trace, env(HERE, warm), d),
            "compiled": cold,
        }
        if args.old:
            old = os.path.abspath(args.old)
            runs["old"] = lambda: wall(trace, env(old, os.path.join(d, "old-cache")), d)
        runs["cached"]()  # the warm cache filled
        results: dict[str, list[float]] = {name: [] for name in runs}
        names = list(runs)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else reversed(names):
                results[name].append(runs[name]())
            print(json.dumps({"round": r + 1, **{k: round(v[-1], 3) for k, v in
                                                 results.items()}}), flush=True)
    floor = statistics.median(results["bpftrace"])
    medians = {}
    for name, values in results.items():
        median = statistics.median(values)
        medians[name] = {"median_s": round(median, 3), "min_s": round(min(values), 3),
                         "max_s": round(max(values), 3), "x_bpftrace": round(median / floor, 2)}
        print(f"{name:9s} median {median:.3f} s (min {min(values):.3f}, max {max(values):.3f}), "
              f"{median / floor:.2f}x bpftrace")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": results, "medians": medians, "kernel": os.uname().release},
                      f, indent=1)


if __name__ == "__main__":
    main()
