"""What holding a child forked without exec costs, per fork: a process that
maps libcudart forks N children one after another (tests/workloads/fork_calls
N 1 seq: each child calls cudaMalloc as fork returns in it, forks a grandchild
that does the same, and is waited for before the next), untraced, traced with
the fork holds (each child waits in its fork until its links are in:
cudaprobe/probe/forkhold.py), and traced without them
(CUDAPROBE_FORK_HOLD_MS=0: each child linked as it is told, its first calls
missed), interleaved per repetition. The run is timed by a shell around it
(date +%s%N), so cudaprobe's own start and end are not in the figure.

Reported: ms per fork (each child and its grandchild: two forks), median and
min over repetitions, and the calls each trace counted against the 1 + 2N made.

    sudo .venv/bin/python benchmarks/fork_hold.py [--forks 200] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import REPO  # noqa: E402
from process_loop import traced, untraced  # noqa: E402

sys.path.insert(0, str(REPO))
from tests.conftest import build_workload  # noqa: E402


def script(app: str, children: int) -> str:
    return (f"s=$(date +%s%N); {app} {children} 1 seq 2> /dev/null || exit 9; "
            "e=$(date +%s%N); echo LOOP_NS=$((e - s))")


def run(cmd: str, tmp: Path, hold_ms: str | None) -> tuple[int, int | None]:
    """(ns, calls counted or None untraced)."""
    if hold_ms is None:
        return untraced(cmd), None
    return traced(cmd, tmp, "-e", "cudaMalloc",
                  env=dict(os.environ, CUDAPROBE_FORK_HOLD_MS=hold_ms))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--forks", type=int, default=200, help="children (each forks one more)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    n = args.forks
    cmd = script(str(build_workload("fork_calls.c")), n)
    modes = {"alone": None, "traced, children held": "20", "traced, no hold": "0"}
    runs: dict[str, list[float]] = {k: [] for k in modes}
    counted: dict[str, list[int]] = {k: [] for k in modes if modes[k] is not None}
    with tempfile.TemporaryDirectory() as d:
        for rep in range(args.reps):
            for mode, hold in modes.items():
                ns, calls = run(cmd, Path(d), hold)
                runs[mode].append(ns / (2 * n) / 1e6)
                if calls is not None:
                    counted[mode].append(calls)
            print(f"rep {rep + 1}/{args.reps}: " + ", ".join(
                f"{k} {v[-1]:.3f} ms" for k, v in runs.items()), flush=True)
    made = 1 + 2 * n
    result = {k: {"median_ms": statistics.median(v), "min_ms": min(v)} for k, v in runs.items()}
    result["calls counted / made"] = {k: [f"{c} / {made}" for c in v] for k, v in counted.items()}
    print(f"{'per fork':<24} {'median ms':>10} {'min ms':>8}")
    for k, v in runs.items():
        print(f"{k:<24} {statistics.median(v):>10.3f} {min(v):>8.3f}")
    for k, v in counted.items():
        print(f"calls counted / made, {k}: " + ", ".join(f"{c} / {made}" for c in v))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
