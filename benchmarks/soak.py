"""Soak test: a long trace at a steady rate, with cudaprobe's memory sampled
(run by scripts/soak, as root; results in docs/reliability.md).

`cudaprobe trace -- soak.py --drive` traces libcudart and the executable of
tests/workloads/exit_mid_call.c in this script's own process tree (so other
programs on the machine do not count) for --seconds:
  - tests/workloads/steady_calls.c runs throughout at --rate loops per
    second (3 calls each: cudaGetDeviceCount, cudaMalloc, cudaFree);
  - every 5 s a batch of exit_mid_call threads each exit in the middle of a
    traced call, leaving pairing-map entries only the sweep removes;
  - the JSONL output is capped with --max-size.
cudaprobe's RSS (VmRSS) is sampled every --sample seconds. Its trailer says
what was traced, lost and swept.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = REPO / "tests" / "workloads"
BIN = REPO / "benchmarks" / "bin"
CUDA = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
MID_CALL_EVERY_S = 5
MID_CALL_THREADS = 4


def build(name: str) -> Path:
    src, out = WORKLOADS / f"{name}.c", BIN / name
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        BIN.mkdir(exist_ok=True)
        subprocess.run(["gcc", "-O1", f"-I{CUDA}/include", "-o", str(out), str(src),
                        f"-L{CUDA}/lib64", "-lcudart", "-lpthread",
                        f"-Wl,-rpath,{CUDA}/lib64"], check=True)
    return out


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def libcudart() -> str:
    return str(sorted((CUDA / "lib64").glob("libcudart.so.*"))[0].resolve())


def drive(seconds: float, rate: int) -> None:
    """The traced command: the steady workload, and the mid-call batches."""
    steady, mid_call = build("steady_calls"), build("exit_mid_call")
    interval_us = str(max(0, 1_000_000 // rate - 3)) if rate else "0"
    workload = subprocess.Popen([str(steady), "0", interval_us, "0"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        subprocess.run([str(mid_call), str(MID_CALL_THREADS), "0"],
                       stdout=subprocess.DEVNULL, check=True)
        time.sleep(MID_CALL_EVERY_S)
    workload.send_signal(signal.SIGTERM)
    workload.wait()


def soak(seconds: float, rate: int, sample_s: float, max_size: str, out_dir: Path) -> dict:
    mid_call = build("exit_mid_call")
    build("steady_calls")
    out = out_dir / "soak.jsonl"
    trace = subprocess.Popen(
        [sys.executable, "-m", "cudaprobe", "trace", "--lib", libcudart(), "--lib",
         str(mid_call), "-e", "cudaGetDeviceCount,cudaMalloc,cudaFree,cudaDeviceSynchronize",
         "-o", str(out), "--max-size", max_size, "--",
         sys.executable, __file__, "--drive", "--seconds", str(seconds), "--rate", str(rate)],
        stderr=subprocess.PIPE, text=True)
    samples = []
    start = time.monotonic()
    while trace.poll() is None:
        try:
            rss = rss_kib(trace.pid)
        except (OSError, RuntimeError):
            break  # exiting
        samples.append({"t_s": round(time.monotonic() - start, 1), "rss_kib": rss,
                        "file_bytes": out.stat().st_size if out.exists() else 0})
        print(f"{samples[-1]['t_s']:8.1f} s  RSS {rss:7d} KiB  "
              f"file {samples[-1]['file_bytes']:>11,d} B", flush=True)
        time.sleep(sample_s)
    stderr = trace.communicate(timeout=120)[1]
    summary = json.loads(out.read_text().splitlines()[-1])["summary"]
    batches = -(-int(seconds) // MID_CALL_EVERY_S)
    rss = [s["rss_kib"] for s in samples]
    warm = [s["rss_kib"] for s in samples if s["t_s"] >= min(60, seconds / 2)] or rss
    return {
        "seconds": seconds, "rate_loops_per_s": rate, "max_size": max_size,
        "rss_kib_first": rss[0], "rss_kib_max": max(rss),
        "rss_kib_after_warmup_min": min(warm), "rss_kib_after_warmup_max": max(warm),
        "file_bytes": out.stat().st_size, "calls": summary["calls"],
        "lost": summary["lost"], "in_flight": summary["in_flight"],
        "exited_mid_call": summary["exited_mid_call"],
        "threads_exited_mid_call": batches * MID_CALL_THREADS,
        "cudaprobe_exit": trace.returncode, "summary_line": stderr.splitlines()[-2:],
        "samples": samples,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--rate", type=int, default=2000, help="loops per second (3 calls each)")
    ap.add_argument("--sample", type=float, default=10, help="seconds between RSS samples")
    ap.add_argument("--max-size", default="50M")
    ap.add_argument("--json", metavar="FILE", help="also write the result here")
    ap.add_argument("--drive", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.drive:
        return drive(args.seconds, args.rate)
    if os.geteuid() != 0:
        raise SystemExit("soak: run as root (cudaprobe attaches uprobes)")
    with tempfile.TemporaryDirectory(prefix="cudaprobe-soak-") as d:
        result = soak(args.seconds, args.rate, args.sample, args.max_size, Path(d))
    brief = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(brief, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
