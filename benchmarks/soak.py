"""Soak test: long traces at a steady and at an overloading rate, cudaprobe's
memory sampled, every call accounted for, and attach/detach cycles that must
leave nothing behind (run by scripts/soak, as root; results in
docs/reliability.md).

Three parts:
  steady     `cudaprobe trace --max-size 50M -- soak_threads 8 RATE SECONDS 5`
             for --seconds: benchmarks/soak_threads.c runs 8 threads at --rate
             loops a second (3 calls each: cudaGetDeviceCount, cudaMalloc,
             cudaFree) and every 5 s 4 threads that each exit inside a traced
             call, leaving pairing entries only the sweep removes. Without
             --rate, the highest rate the reader keeps up with is found first
             (trial runs of --trial-seconds at doubling rates: the last with
             nothing lost and the workload at its rate).
  overload   the same for --overload-seconds with the threads unpaced: the
             decoder falls behind (the reader spools what it has not read)
             or, past the reader, the ring buffer fills; what is lost must
             be counted.
  cycles     --cycles attach/detach cycles in this process (soak_cycles.py).
Each trace is checked: the calls the workload made (it counts them) = the
calls the kernel counted = the rows decoded + the calls lost in the kernel,
and the file's rows + `output_max_size` = the rows decoded. Sampled every --sample seconds:
cudaprobe's memory (the RSS of cudaprobe and of its reader process,
probe/ringbuf.py) and the disk its spool holds. The workload is the traced
command itself, not a child of it: children are attached at the poll after
their fork, and their first calls are missed (docs/attach.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from soak_cycles import cycles  # beside this file: found when it is run

from cudaprobe.probe.ringbuf import READER_NAME

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = REPO / "tests" / "workloads"
BENCH = REPO / "benchmarks"
BIN = BENCH / "bin"
CUDA = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
THREADS = 8
MID_CALL_EVERY_S = 5
EVENTS = "cudaGetDeviceCount,cudaMalloc,cudaFree,cudaDeviceSynchronize"
NOT_KERNEL_LOSS = ("output_max_size",)  # rows decoded, then not written: in `calls` already
# the bounds docs/reliability.md states for cudaprobe's RSS (default 16 MiB ring):
STEADY_RSS_SPREAD_KIB = 10 << 10  # after warm-up, reader keeping up: max - min
OVERLOAD_RSS_EXTRA_KIB = 32 << 10  # overloaded: above the steady run's largest (the lag is on disk)
MAX_LAG_S = 2.0  # a rate is kept up with when the decoder ends this close behind the workload


def build(src: Path) -> Path:
    out = BIN / src.stem
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


def reader_of(pid: int) -> int | None:
    """cudaprobe's reader process (probe/ringbuf.py), a child named READER_NAME."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            if f"\nPPid:\t{pid}\n" in status and status.startswith(f"Name:\t{READER_NAME}\n"):
                return int(entry.name)
    return None


def spool_bytes(pid: int) -> int:
    """Disk the spool holds (allocated: the decoded part is hole-punched): the
    unlinked temporary file among cudaprobe's descriptors."""
    held = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
            if target.startswith(tempfile.gettempdir()) and target.endswith("(deleted)"):
                held += os.stat(fd).st_blocks * 512
        except OSError:
            continue
    return held


def libcudart() -> str:
    return str(sorted((CUDA / "lib64").glob("libcudart.so.*"))[0].resolve())


def trace(seconds: float, rate: int, mid_call: bool, sample_s: float, max_size: str,
          out_dir: Path, quiet: bool = False) -> dict:
    """One traced run, its RSS samples and its accounting."""
    out = out_dir / "soak.jsonl"
    out.unlink(missing_ok=True)
    workload = build(BENCH / "soak_threads.c")
    argv = [sys.executable, "-m", "cudaprobe", "trace", "--lib", libcudart(), "--lib",
            str(workload), "-e", EVENTS, "-o", str(out), "--max-size", max_size, "--",
            str(workload), str(THREADS), str(rate), str(seconds),
            str(MID_CALL_EVERY_S if mid_call else 0)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples = []
    start = time.monotonic()
    reader = None
    while proc.poll() is None:
        try:
            reader = reader or reader_of(proc.pid)
            rss = rss_kib(proc.pid)
            spool = spool_bytes(proc.pid)
        except (OSError, RuntimeError):
            break  # exiting
        reading = reader is not None
        try:
            rss += rss_kib(reader) if reader else 0
        except (OSError, RuntimeError):
            reading = False  # the reader is done (detached): the decoder drains the spool alone
        samples.append({"t_s": round(time.monotonic() - start, 1), "rss_kib": rss,
                        "spool_bytes": spool, "reader": reading})
        if not quiet:
            print(f"{samples[-1]['t_s']:8.1f} s  RSS {rss:7d} KiB  spool {spool:>13,d} B",
                  flush=True)
        time.sleep(sample_s)
    stdout, stderr = proc.communicate(timeout=300)
    lines = out.read_text().splitlines()
    summary = json.loads(lines[-1])["summary"]
    made = json.loads(stdout)
    calls_made = made["calls"]
    kernel_lost = sum(v for k, v in summary["lost"].items() if k not in NOT_KERNEL_LOSS)
    rss = [s["rss_kib"] for s in samples]
    # the steady bound is of a trace running: once the reader has exited, its
    # memory is gone from the sum, and a decoder behind the workload samples on
    warm = [s["rss_kib"] for s in samples
            if s["t_s"] >= min(60, seconds / 2) and s["reader"]] or rss
    return {
        "seconds": seconds, "threads": THREADS, "rate_loops_per_s": rate or "unpaced",
        "calls_made": calls_made, "calls_counted": summary["calls"],
        "rows_decoded": summary["rows"], "lost": summary["lost"],
        "rows_in_file": len(lines) - 1,
        # the kernel counts every call; each is a row or a loss it counted too
        "calls_made == counted": calls_made == summary["calls"],
        "counted == rows decoded + lost in kernel":
            summary["calls"] == summary["rows"] + kernel_lost,
        "rows in file + output_max_size == rows decoded":
            len(lines) - 1 + summary["lost"].get("output_max_size", 0) == summary["rows"],
        "in_flight": summary["in_flight"], "exited_mid_call": summary["exited_mid_call"],
        "threads_exited_mid_call": made["exited_mid_call"],
        "file_bytes": out.stat().st_size, "cudaprobe_exit": proc.returncode,
        # how long the decoder went on after the workload ended: its lag behind the spool
        "decoder_lag_s": round(summary["duration_s"] - made["seconds"], 1),
        "spool_bytes_max": max(s["spool_bytes"] for s in samples),
        "rss_kib_max": max(rss), "rss_kib_after_warmup_min": min(warm),
        "rss_kib_after_warmup_max": max(warm), "summary_line": stderr.splitlines()[-1:],
        "samples": samples,
    }


def find_rate(trial_s: float, max_size: str, out_dir: Path) -> tuple[int, list[dict]]:
    """The highest rate of 2500, 5000, 10000 ... loops/s at which a trial run
    loses nothing, the workload still makes 95% of the calls asked, and the
    decoder ends at most MAX_LAG_S behind it (the reader spools what the
    decoder has not read yet: keeping up is the decoder's)."""
    best, trials, rate = 0, [], 2500
    while True:
        r = trace(trial_s, rate, False, 1.0, max_size, out_dir, quiet=True)
        kept_up = (r["calls_made == counted"] and r["counted == rows decoded + lost in kernel"]
                   and sum(v for k, v in r["lost"].items() if k not in NOT_KERNEL_LOSS) == 0
                   and r["calls_made"] >= 0.95 * 3 * rate * trial_s
                   and r["decoder_lag_s"] <= MAX_LAG_S)
        trials.append({"rate_loops_per_s": rate, "calls_made": r["calls_made"],
                       "lost": r["lost"], "decoder_lag_s": r["decoder_lag_s"],
                       "kept_up": kept_up})
        print(f"trial {rate:7d} loops/s: {r['calls_made']:9d} calls, lost {r['lost']}, "
              f"decoder {r['decoder_lag_s']} s behind: "
              f"{'kept up' if kept_up else 'did not keep up'}", flush=True)
        if not kept_up:
            return best, trials
        best, rate = rate, rate * 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600, help="the steady run")
    ap.add_argument("--rate", type=int, default=0,
                    help="loops per second of the steady run (3 calls each); default: found")
    ap.add_argument("--trial-seconds", type=float, default=20)
    ap.add_argument("--overload-seconds", type=float, default=120)
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--sample", type=float, default=10, help="seconds between RSS samples")
    ap.add_argument("--max-size", default="50M")
    ap.add_argument("--json", metavar="FILE", help="also write the results here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("soak: run as root (cudaprobe attaches uprobes)")
    results: dict = {"command": " ".join(["scripts/soak", *sys.argv[1:]])}
    with tempfile.TemporaryDirectory(prefix="cudaprobe-soak-") as d:
        rate = args.rate
        if not rate:
            rate, results["rate_trials"] = find_rate(args.trial_seconds, args.max_size, Path(d))
        print(f"steady: {THREADS} threads, {rate} loops/s, {args.seconds:.0f} s", flush=True)
        steady = results["steady"] = trace(args.seconds, rate, True, args.sample,
                                           args.max_size, Path(d))
        steady["rss within bound"] = (steady["rss_kib_after_warmup_max"]
                                      - steady["rss_kib_after_warmup_min"]
                                      <= STEADY_RSS_SPREAD_KIB)
        if args.overload_seconds:
            print(f"overload: {THREADS} threads unpaced, {args.overload_seconds:.0f} s",
                  flush=True)
            overload = results["overload"] = trace(args.overload_seconds, 0, False, args.sample,
                                                   args.max_size, Path(d))
            overload["rss within bound"] = (overload["rss_kib_max"] <= OVERLOAD_RSS_EXTRA_KIB
                                            + steady["rss_kib_after_warmup_max"])
    if args.cycles:
        print(f"{args.cycles} attach/detach cycles", flush=True)
        results["cycles"] = cycles(args.cycles, libcudart(),
                                   build(WORKLOADS / "steady_calls.c"))
    brief = {k: ({kk: vv for kk, vv in v.items() if kk != "samples"} if isinstance(v, dict)
                 else v) for k, v in results.items()}
    print(json.dumps(brief, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
