"""What following a command's descendants costs per process started: a shell
loop of N short processes, untraced and under `cudaprobe trace -- bash -c
LOOP`, interleaved per repetition. The loop times itself (date +%s%N before
and after), so cudaprobe's own start and end are not in the figure.

  true        N runs of /bin/true: a fork and an exec each, no CUDA (the
              fork tracepoint adds each child; nothing is linked)
  cuda        N runs of tests/workloads/runtime_calls (10 runtime calls each,
              within milliseconds of the exec): each is held at its open of
              libcudart until its own probes are in (cudaprobe/probe/opengate.py)
  bystander   the cuda loop started beside a traced tree, not in it: its opens
              of libcudart are let go at once, it gets no probes; and the true
              loop beside it: each exec is let go at once too (the gate holds
              every exec on the node's file systems, for a program with the
              runtime linked in that the tree may exec)

Reported: ms per process (median and min over repetitions), traced minus
untraced, and the calls the trace counted against the calls made.

    sudo .venv/bin/python benchmarks/process_loop.py [--processes 1000] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import REPO, cudaprobe  # noqa: E402

sys.path.insert(0, str(REPO))
from tests.conftest import build_workload  # noqa: E402


def loop_script(argv: str, n: int) -> str:
    """A bash loop of `n` runs of `argv` that prints its own wall time in ns."""
    return (f"s=$(date +%s%N); for i in $(seq {n}); do {argv} > /dev/null; done; "
            "e=$(date +%s%N); echo LOOP_NS=$((e - s))")


def loop_ns(out: str) -> int:
    return int(next(line for line in out.splitlines() if line.startswith("LOOP_NS="))[8:])


def untraced(script: str) -> int:
    return loop_ns(subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                                  check=True).stdout)


def traced(script: str, tmp: Path, *options: str,
           env: dict[str, str] | None = None) -> tuple[int, int]:
    """(loop ns, calls the trace counted); `options` given to `trace` too."""
    out = tmp / "t.jsonl"
    p = subprocess.run(cudaprobe("trace", *options, "-o", str(out), "--force", "--", "bash",
                                 "-c", script),
                       capture_output=True, text=True, check=True, env=env)
    summary = json.loads(out.read_text().splitlines()[-1])["summary"]
    return loop_ns(p.stdout), summary["calls"]


def beside(script: str, app: str, tmp: Path) -> int:
    """The loop's ns while `trace -- APP-in-a-loop` traces a tree it is not in."""
    out, err, pidfile = tmp / "b.jsonl", tmp / "b.err", tmp / "tree.pid"
    tree = f"echo $$ > {pidfile}; while :; do {app} 1 1 > /dev/null; sleep 0.05; done"
    with open(err, "w") as errors:
        tracer = subprocess.Popen(cudaprobe("trace", "-o", str(out), "--force", "--", "bash",
                                            "-c", tree), stderr=errors)
    try:
        deadline = time.monotonic() + 120
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline and tracer.poll() is None, err.read_text()
            time.sleep(0.1)
        time.sleep(1.0)
        return untraced(script)
    finally:
        os.kill(int(pidfile.read_text()), signal.SIGKILL)  # the tree, then cudaprobe ends
        tracer.wait(timeout=120)
        pidfile.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    n = args.processes
    app = str(build_workload("runtime_calls.c"))
    scripts = {"true": loop_script("/bin/true", n), "cuda": loop_script(f"{app} 1 1", n)}
    runs: dict[str, list[float]] = {k: [] for k in (
        "true alone", "true traced", "true beside a trace", "cuda alone", "cuda traced",
        "cuda beside a trace")}
    counted = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for rep in range(args.reps):
            runs["true alone"].append(untraced(scripts["true"]) / n / 1e6)
            runs["true traced"].append(traced(scripts["true"], tmp)[0] / n / 1e6)
            runs["true beside a trace"].append(beside(scripts["true"], app, tmp) / n / 1e6)
            runs["cuda alone"].append(untraced(scripts["cuda"]) / n / 1e6)
            ns, calls = traced(scripts["cuda"], tmp)
            runs["cuda traced"].append(ns / n / 1e6)
            counted.append(calls)
            runs["cuda beside a trace"].append(beside(scripts["cuda"], app, tmp) / n / 1e6)
            print(f"rep {rep + 1}/{args.reps}: " + ", ".join(
                f"{k} {v[-1]:.3f}" for k, v in runs.items()), flush=True)
    result = {k: {"median_ms": statistics.median(v), "min_ms": min(v)} for k, v in runs.items()}
    result["calls counted / made"] = [f"{c} / {10 * n}" for c in counted]
    print(f"{'per process':<22} {'median ms':>10} {'min ms':>8}")
    for k, v in runs.items():
        print(f"{k:<22} {statistics.median(v):>10.3f} {min(v):>8.3f}")
    print("calls counted / made:", ", ".join(result["calls counted / made"]))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
