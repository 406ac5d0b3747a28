"""What serve costs a launch-bound PyTorch job, measured inside one run: the
MLP step of benchmarks/torch_workloads.py runs for the whole check, and serve
(the DaemonSet's: --api driver on the driver library) is started and stopped
beside it, so that windows with serve and windows without it alternate in
one process (no process-to-process spread: CUDA context, memory layout,
clocks). Each pair is an untraced window and a served one, in turn ABBA, each
WINDOW seconds of steady state (serve's start and stop left out); each
window's mean step time (a duty cycle's cost is in its slices: a median
would not see it); each pair's difference; their mean with a 95% interval.
Exact counting first (the method's resolution), then --duty.

    python3 scripts/gpu/duty_cost.py --lib LIBCUDA --out FILE [--pairs 8]
        [--exact-pairs 4] [--window 10] [--duty 2%] [--duty-period 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

TORCH_PY = "/opt/torch/.venv/bin/python"
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
       10: 2.23, 11: 2.20, 12: 2.18, 15: 2.13, 20: 2.09}  # Student's t, two-sided 95%


def serve(lib: str, extra: list[str]) -> subprocess.Popen:
    err = open("/tmp/duty-cost-serve.err", "w")
    p = subprocess.Popen([sys.executable, "-m", "cudaprobe", "serve", "--prometheus",
                          "127.0.0.1:9467", "--api", "driver", "--lib", lib, *extra],
                         stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 60
    while "serving Prometheus" not in open("/tmp/duty-cost-serve.err").read():
        if p.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"serve did not start: {open('/tmp/duty-cost-serve.err').read()}")
        time.sleep(0.1)
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--exact-pairs", type=int, default=4)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--duty", default="2%")
    ap.add_argument("--duty-period", default="5")
    a = ap.parse_args()
    runs = [("exact", [])] * a.exact_pairs + [
        (f"duty {a.duty}", ["--duty", a.duty, "--duty-period", a.duty_period])] * a.pairs
    total = len(runs) * (2 * a.window + 30) + 60  # a bound: --stop ends it
    log, ready, go, stop = ("/tmp/duty-cost-steps.txt", "/tmp/duty-cost.ready",
                            "/tmp/duty-cost.go", "/tmp/duty-cost.stop")
    for f in (log, ready, go, stop):
        if os.path.exists(f):
            os.unlink(f)
    work = subprocess.Popen([TORCH_PY, "benchmarks/torch_workloads.py", "mlp", "--seconds",
                             str(total), "--warmup", "200", "--ready", ready, "--go", go,
                             "--log", log, "--stop", stop], stdout=subprocess.PIPE, text=True)
    while not os.path.exists(ready):
        time.sleep(0.1)
    open(go, "w").close()
    time.sleep(3)
    windows = []  # (pair, label, t0, t1)
    for i, (label, extra) in enumerate(runs):
        for served in ((False, True) if i % 2 == 0 else (True, False)):
            p = serve(a.lib, extra) if served else None
            if p is not None:
                time.sleep(1.5)  # its start's work done
            t0 = time.monotonic()
            time.sleep(a.window)
            windows.append((i, label if served else "untraced", t0, time.monotonic()))
            if p is not None:
                p.send_signal(2)
                p.wait(timeout=60)
                time.sleep(1.0)
        print(f"pair {i + 1}/{len(runs)} done", flush=True)
    open(stop, "w").close()
    out = work.communicate()[0]
    steps = [tuple(map(float, line.split())) for line in open(log)]
    mean = {}
    for i, label, t0, t1 in windows:
        ms = [dt * 1e3 for end, dt in steps if t0 <= end <= t1]
        mean[i, label] = (statistics.mean(ms), len(ms))
    lines = [f"workload: {out.strip()}", f"window {a.window} s, ABBA pairs; mean step ms"]
    for label in dict.fromkeys(label for label, _ in runs):
        diffs = []
        for i, (lab, _) in enumerate(runs):
            if lab != label:
                continue
            (u, nu), (s, ns) = mean[i, "untraced"], mean[i, label]
            diffs.append((s - u) / u * 100)
            lines.append(f"  {label} pair {i + 1}: untraced {u:.4f} ms ({nu} steps), "
                         f"served {s:.4f} ms ({ns} steps): {diffs[-1]:+.2f}%")
        avg = statistics.mean(diffs)
        half = (T95.get(len(diffs) - 1, 2.0) * statistics.stdev(diffs) / len(diffs) ** 0.5
                if len(diffs) > 1 else float("nan"))
        lines.append(f"{label}: {avg:+.2f}% a step (95% interval {avg - half:+.2f}% to "
                     f"{avg + half:+.2f}%) over {len(diffs)} pairs")
    with open(a.out, "a") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
