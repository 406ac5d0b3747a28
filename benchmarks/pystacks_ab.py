"""The probes' per-call cost with --py-stacks, one source tree against another:
`cudaprobe trace --errors-only --py-stacks` (no rows made: the probes, the
stack records' spooling and parsing) over pystacks_cost.py's loop, each tree
in turn, round by round (the order flips each round), so that a shared
machine's load falls on both alike. Prints each round, then the medians.

    git archive OLD | tar -x -C /tmp/old
    sudo python benchmarks/pystacks_ab.py /tmp/old . [--python P] [--rounds 7] [--calls 50000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from pystacks_cost import LIBCUDART, WORKLOAD


def ns_per_call(argv: list[str], tree: str) -> float:
    out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=tree,
                         env={**os.environ, "PYTHONPATH": os.path.abspath(tree)}).stdout
    return json.loads([line for line in out.splitlines() if line.startswith('{"ns')][-1])[
        "ns_per_call"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--python", default="/usr/bin/python3.11")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=50_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "loop.py")
        with open(script, "w") as f:
            f.write(WORKLOAD)
        cmd = [args.python, script, LIBCUDART, str(args.calls), "10"]
        trace = [sys.executable, "-m", "cudaprobe", "trace", "-e", "cudaRuntimeGetVersion",
                 "--lib", LIBCUDART, "-o", os.path.join(d, "t.jsonl"), "--force",
                 "--errors-only", "--py-stacks", "--", *cmd]
        results: dict[str, list[float]] = {"untraced": [], args.a: [], args.b: []}
        for r in range(args.rounds):
            results["untraced"].append(ns_per_call(cmd, d))
            for tree in (args.a, args.b) if r % 2 == 0 else (args.b, args.a):
                results[tree].append(ns_per_call(trace, tree))
            print(json.dumps({"round": r + 1, **{k: round(v[-1]) for k, v in results.items()}}),
                  flush=True)
    for name, values in results.items():
        print(f"{name}: median {statistics.median(values):.0f} ns a call")


if __name__ == "__main__":
    main()
