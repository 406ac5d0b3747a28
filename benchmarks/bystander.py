"""What tracing one process costs a process that is not traced:
a bystander runs the bench loop (benchmarks/bench_loop.c, cudaMalloc in a
loop on a private copy of libcudart) while another process, mapping the same
library, is traced. Interleaved per repetition, side by side:

  alone        the bystander, nothing traced
  pid          while `cudaprobe trace --pid P` traces a looping process P
  system-wide  while `cudaprobe trace --lib LIB --comm NAME` follows processes
               by name: one link per library for every process, as before
               per-process links, so the bystander traps and the BPF filter
               drops its calls after the trap

Reported: the bystander's ns/call (median and min of the repetitions) and
the ratio to `alone`. Goal: pid within 1.1x of alone.

    sudo .venv/bin/python benchmarks/bystander.py [--calls 200000] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import CUDA, build_loop, cudaprobe, private_copy, workload_result  # noqa: E402


def measure(loop: Path, calls: int) -> float:
    p = subprocess.run([str(loop), str(calls)], capture_output=True, text=True, check=True)
    return workload_result(p.stdout)["ns_per_call"]


def while_traced(loop: Path, calls: int, args: list[str], tmp: Path) -> float:
    """The bystander's ns/call while cudaprobe traces a looping process."""
    # the traced process: 1000 calls/s, for longer than a repetition takes
    target = subprocess.Popen([str(loop), "1000000000", "1", "1000"], stdout=subprocess.DEVNULL)
    tracer = subprocess.Popen(cudaprobe("trace", "-f", "jsonl", "-o", str(tmp / "t.jsonl"),
                                        "--force", *[a.replace("PID", str(target.pid))
                                                     for a in args]),
                              stderr=subprocess.PIPE, text=True)
    try:
        for line in tracer.stderr:  # attached once the follower speaks ("tracing N
            if "attached to" in line or "following" in line:  # functions" comes before)
                break
        time.sleep(0.3)
        return measure(loop, calls)
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.communicate(timeout=60)
        target.kill()
        target.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default=str(next((CUDA / "lib64").glob("libcudart.so.*"))))
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args()
    loop = build_loop()
    results: dict[str, list[float]] = {"alone": [], "pid": [], "system-wide": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        lib = private_copy(a.lib, tmp)
        for _ in range(a.reps):
            results["alone"].append(measure(loop, a.calls))
            results["pid"].append(while_traced(loop, a.calls, ["--pid", "PID"], tmp))
            results["system-wide"].append(while_traced(
                loop, a.calls, ["--lib", lib, "--comm", "no-such-comm"], tmp))
    alone = statistics.median(results["alone"])
    summary = {name: {"median_ns": round(statistics.median(v), 1), "min_ns": round(min(v), 1),
                      "ratio": round(statistics.median(v) / alone, 3)}
               for name, v in results.items()}
    print(json.dumps({"calls": a.calls, "reps": a.reps, "bystander": summary}, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps({"calls": a.calls, "raw": results,
                                            "bystander": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
