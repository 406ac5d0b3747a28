"""In-kernel cost of each BPF program run, side by side (root).

Runs the bench workload (benchmarks/bench_loop.c) paced, so that no event is
lost (a dropped event makes the exit program cheaper), under each
configuration in turn, with `kernel.bpf_stats_enabled=1`, and reads
`run_time_ns / run_cnt` of the tracer's programs from its /proc/PID/fdinfo
twice, mid-run: the difference is ns per run of each program over that
window. Configurations: the floor (bpftrace, count-only uprobe + uretprobe),
`cudaprobe trace -o FILE` and `cudaprobe stats`. The stats accounting itself
adds ~20-30 ns to every program, the floor's too. `--baseline DIR` also runs
trace and stats from another source tree (e.g. `git archive` of main,
unpacked in DIR), interleaved with this one's in each repetition, so that a
change's cost is read side by side in one run.

    python3 benchmarks/progtime.py [--reps 3] [--func cudaMalloc|cudaGetDeviceCount]
                                   [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the workload and the private library copy)

CALLS, RATE = 3_000_000, 300_000  # 10 s at a rate the consumer keeps up with


def program_times(pid: int) -> dict[str, tuple[int, int]]:
    """fd -> (run_time_ns, run_cnt) of the BPF programs process `pid` holds."""
    out = {}
    for fd in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            text = fd.read_text()
        except OSError:
            continue
        t, n = re.search(r"run_time_ns:\s*(\d+)", text), re.search(r"run_cnt:\s*(\d+)", text)
        if t and n:
            out[fd.name] = (int(t[1]), int(n[1]))
    return out


def measure(argv: list[str], cwd: str | None = None) -> list[int]:
    """ns per run of each program that ran in the window (the entry and exit
    programs: fdinfo does not tell which is which), cheaper first. `cwd`: the
    source tree whose cudaprobe runs (`python -m` imports from there first)."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    # the window opens 1 s after the programs first run, however long the tracer
    # took to start (seconds on a loaded machine), well before the workload ends
    deadline = time.monotonic() + 60
    while (p.poll() is None and time.monotonic() < deadline
           and not any(n for _t, n in program_times(p.pid).values())):
        time.sleep(0.1)
    time.sleep(1)
    a = program_times(p.pid)
    time.sleep(3)
    b = program_times(p.pid)
    p.wait()
    runs = [(b[fd][1] - a[fd][1], b[fd][0] - a[fd][0]) for fd in a if fd in b]
    return sorted(round(t / n) for n, t in runs if n > 100_000)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--func", default="cudaMalloc", choices=["cudaMalloc", "cudaGetDeviceCount"])
    ap.add_argument("--baseline", metavar="DIR",
                    help="another source tree: its trace and stats run beside this one's")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("progtime: needs root", file=sys.stderr)
        return 2
    Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1")
    loop = bench.build_loop()
    with tempfile.TemporaryDirectory() as tmp:
        lib = (str(loop) if args.func == "cudaGetDeviceCount" else
               bench.private_copy(os.path.realpath(next((bench.CUDA / "lib64").glob(
                   "libcudart.so.*"))), Path(tmp)))
        w = [str(loop), str(CALLS), "1", str(RATE), args.func]
        configs = {
            "floor": ["bpftrace", "-e", bench.floor_program(lib, args.func), "-c", " ".join(w)],
            "trace": bench.cudaprobe("trace", "--lib", lib, "-e", args.func, "-o",
                                     f"{tmp}/calls.jsonl", "--force", "--", *w),
            "stats": bench.cudaprobe("stats", "--lib", lib, "-e", args.func, "--", *w),
        }
        runs = [(name, argv, None) for name, argv in configs.items()]
        if args.baseline:
            base = str(Path(args.baseline).resolve())
            runs += [(f"{name}@base", configs[name], base) for name in ("trace", "stats")]
        for rep in range(args.reps):
            for name, argv, cwd in runs:
                ns = measure(argv, cwd)
                print(f"rep {rep + 1} {name:<11} ns per run {ns} sum {sum(ns)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
