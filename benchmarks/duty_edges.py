"""serve --duty's estimate of a sampled function against a function counted
exactly beside it in the same loop: benchmarks/soak_threads.c's threads each
call cudaGetDeviceCount (sampled), cudaMalloc and cudaFree (traced all the
time, counted exactly) once a loop, so the sampled function's scaled count
over cudaMalloc's should be 1. serve probes the toolkit's libcudart on the
node (no target) with --duty FRACTION --duty-period PERIOD; the metrics are
scraped after SECONDS.

  sudo .venv/bin/python benchmarks/duty_edges.py [--threads 4] [--rate 20000]
      [--seconds 40] [--duty 10%] [--period 1]

Prints the two counts, the ratio, the slices and serve's relative error.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from soak import CUDA, build  # beside this file: found when it is run

PORT = 9476


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--rate", type=int, default=20000, help="loops a second, all threads")
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--duty", default="10%")
    ap.add_argument("--period", default="1")
    a = ap.parse_args()
    exe = build(Path(__file__).with_name("soak_threads.c"))
    work = subprocess.Popen([str(exe), str(a.threads), str(a.rate), str(int(a.seconds) + 20)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    serve = subprocess.Popen(
        [sys.executable, "-m", "cudaprobe", "serve", "--prometheus", f"127.0.0.1:{PORT}",
         "--lib", str(CUDA / "lib64" / "libcudart.so"), "--duty", a.duty,
         "--duty-period", a.period], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        time.sleep(a.seconds)
        text = urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=30).read()
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=120)
        work.terminate()
        work.wait()
    got: dict[str, float] = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            if s.name == "cudaprobe_calls_total" and s.labels["process"] == exe.name:
                got[s.labels["function"]] = s.value
            elif s.name in ("cudaprobe_sampled_windows_total", "cudaprobe_sampling_ratio"):
                got[s.name] = s.value
            elif s.name == "cudaprobe_sampling_relative_error":
                got["relative error"] = s.value
    sampled, exact = got.get("cudaGetDeviceCount", 0), got.get("cudaMalloc", 0)
    print(f"{a.threads} threads, {a.rate} loops/s, serve --duty {a.duty} --duty-period "
          f"{a.period}, {a.seconds:g} s: cudaGetDeviceCount (sampled, scaled) {sampled:.0f}, "
          f"cudaMalloc (exact) {exact:.0f}, ratio {sampled / exact if exact else 0:.3f}; "
          f"{got.get('cudaprobe_sampled_windows_total', 0):.0f} slices, relative error "
          f"{got.get('relative error', 0):.4f}")


if __name__ == "__main__":
    main()
