"""Attach time and per-call cost with every function (`-e all`) vs the default set.

Run as root: `python benchmarks/attach_all.py [--reps 3] [--calls 200000]`
(docs: BENCHMARKS.md, "Every function"). Each repetition runs, interleaved,
the bench loop (benchmarks/bench_loop.c: cudaMalloc, failing fast without a
GPU) untraced, under `cudaprobe trace -e cudaMalloc` (one probe), with the
default set, and with `-e all`, the probes on a private copy of libcudart (as bench.py does) and on
libcuda (scripts/setup's .deps copy, or --libcuda). Reported per
configuration: symbols probed, attach_s (the summary's: BPF program loaded
and every uprobe_multi link made), startup_s (command start to attached),
and the loop's ns/call, min and median over repetitions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import CUDA, REPO, build_loop, cudaprobe, private_copy, workload_result  # noqa: E402

from cudaprobe.probe.plan import plan_probes, select_functions  # noqa: E402


def default_libcuda() -> str:
    path = REPO / ".deps" / "libcuda.path"
    return path.read_text().strip() if path.exists() else "/usr/lib/x86_64-linux-gnu/libcuda.so.1"


def traced(libs: list[str], events: list[str], loop: list[str], tmp: Path) -> dict:
    out = tmp / "calls.jsonl"
    p = subprocess.run(cudaprobe("trace", *(a for lib in libs for a in ("--lib", lib)), *events,
                                 "-f", "jsonl", "-o", str(out), "--force", "--", *loop),
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-500:])
    summary = json.loads(out.read_text().splitlines()[-1])["summary"]
    res = workload_result(p.stdout)
    return {"ns_per_call": res["ns_per_call"], "attach_s": summary["attach_s"],
            "startup_s": summary["startup_s"], "lost": summary["lost_total"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default=str(next((CUDA / "lib64").glob("libcudart.so.*"))))
    ap.add_argument("--libcuda", default=default_libcuda())
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    loop_bin = build_loop()
    results: dict[str, list[dict]] = {"untraced": [], "one": [], "default": [], "all": []}
    with tempfile.TemporaryDirectory() as tmp:
        libs = [private_copy(args.lib, Path(tmp)), args.libcuda]
        symbols = {name: len(plan_probes(select_functions(ev), libs).attachments)
                   for name, ev in (("one", ["cudaMalloc"]), ("default", None), ("all", ["all"]))}
        loop = [str(loop_bin), str(args.calls), "1", "0", "cudaMalloc"]
        for _ in range(args.reps):
            p = subprocess.run(loop, capture_output=True, text=True, timeout=600)
            results["untraced"].append({"ns_per_call": workload_result(p.stdout)["ns_per_call"]})
            results["one"].append(traced(libs, ["-e", "cudaMalloc"], loop, Path(tmp)))
            results["default"].append(traced(libs, [], loop, Path(tmp)))
            results["all"].append(traced(libs, ["-e", "all"], loop, Path(tmp)))
    report = {}
    for name, runs in results.items():
        row = {"symbols_attached": symbols.get(name, 0)}
        for key in ("ns_per_call", "attach_s", "startup_s"):
            values = [r[key] for r in runs if key in r]
            if values:
                row[key] = {"min": min(values), "median": statistics.median(values)}
        report[name] = row
        print(name, json.dumps(row))
    if args.json:
        Path(args.json).write_text(json.dumps({"calls": args.calls, "reps": args.reps,
                                               "results": report, "runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
