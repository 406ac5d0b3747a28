"""Side-by-side overhead benchmark of cudaprobe (run by scripts/bench, as root).

Every configuration runs the same workload (benchmarks/bench_loop.c: cudaMalloc
in a loop against the real libcudart; it fails fast without a GPU, so the
loop measures call + probe cost) in each repetition, interleaved, so ratios
come from one run on one (noisy, shared) machine:

  untraced        the workload alone
  floor           bpftrace, count-only uprobe + uretprobe on cudaMalloc: the
                  least any tracer that reports results pays per call
  trace-jsonl/csv/table   cudaprobe trace -o FILE in each format
  stats           cudaprobe stats (in-kernel aggregation), when present
  export          the script from `cudaprobe export bpftrace`, when present

The loop's cudaMalloc calls fail (no GPU), and cudaprobe reads a call's
out-parameters only when it succeeds; so the same configurations (trace to
JSONL only) run again on a loop of a cudaGetDeviceCount that the workload
defines itself (probed in the executable), which succeeds and whose
out-parameter is read at exit.

The library is a private copy of libcudart (same bytes, its own inode),
which the workload loads through LD_LIBRARY_PATH: uprobes belong to an
inode, so probes that other tracers on the machine hold on the toolkit's
library (a test suite running next to the bench) do not trap our calls.

Reported: ns/call (min and median over repetitions), ratio of the median to
the floor's, events recorded vs calls made, cudaprobe's own CPU seconds, and
the time from start to probes attached. Then two scenarios: a paced rate
(default 200k calls/s for 30 s) under `trace`, for loss and CPU, and two
threads at full speed, for loss and pairing. Then the reader:
`reader`, its sustained events/s on one core (the reader process's loop,
probe/ringbuf.py: find the committed records, pwrite them to a spool, over
a ring's worth of cudaMalloc records at a time), and `threads4`, four
unpaced threads of cudaMalloc + cudaFree (tests/workloads/malloc_free_threads.c,
400,000 calls) traced in each format: rows and lost.
`--only reader,threads4` runs only those (names: overhead, success, paced,
two_threads, reader, threads4). `--baseline DIR` adds, to overhead and
success, the trace and stats configurations of another source tree (e.g.
`git archive` of main unpacked in DIR), interleaved with this tree's in each
repetition: a change's cost, side by side in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOOP_SRC = REPO / "benchmarks" / "bench_loop.c"
LOOP_BIN = REPO / "benchmarks" / "bin" / "bench_loop"
CUDA = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


def build_loop() -> Path:
    if not LOOP_BIN.exists() or LOOP_BIN.stat().st_mtime < LOOP_SRC.stat().st_mtime:
        LOOP_BIN.parent.mkdir(exist_ok=True)
        subprocess.run(["gcc", "-O2", f"-I{CUDA}/include", "-o", str(LOOP_BIN), str(LOOP_SRC),
                        f"-L{CUDA}/lib64", "-lcudart", "-lpthread",
                        f"-Wl,-rpath,{CUDA}/lib64"], check=True)
    return LOOP_BIN


def cudaprobe(*args: str) -> list[str]:
    return [sys.executable, "-m", "cudaprobe", *args]


def has_command(*words: str) -> bool:
    p = subprocess.run(cudaprobe(*words, "--help"), capture_output=True, text=True)
    return p.returncode == 0


def private_copy(lib: str, tmp: Path) -> str:
    """A copy of `lib` under tmp/lib/, with the same file name (its soname)."""
    d = tmp / "lib"
    d.mkdir()
    copy = d / Path(lib).name
    shutil.copy2(lib, copy)
    os.environ["LD_LIBRARY_PATH"] = str(d)  # the workloads, through bpftrace -c and cudaprobe --
    return str(copy)


def run_measured(argv: list[str], timeout: float,
                 cwd: str | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """Run argv (in `cwd`: the source tree whose `python -m cudaprobe` runs);
    returns the process and the CPU seconds it and its children used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return p, cpu


def workload_result(stdout: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith('{"calls"'):
            return json.loads(line)
    raise RuntimeError(f"workload printed no result: {stdout[-300:]!r}")


def floor_program(lib: str, func: str) -> str:
    """The floor: a bpftrace count-only uprobe + uretprobe on `func` in `lib`,
    for the command bpftrace starts (-c)."""
    return (f'uprobe:"{lib}":{func} /pid == cpid/ {{ @entries = count(); }} '
            f'uretprobe:"{lib}":{func} /pid == cpid/ {{ @returns = count(); }}')


class Bench:
    def __init__(self, lib: str, loop: Path, tmp: Path, func: str = "cudaMalloc",
                 tree: str | None = None) -> None:
        self.lib = lib
        self.loop = loop
        self.tmp = tmp
        self.func = func  # what the loop calls, in lib
        self.tree = tree  # the source tree cudaprobe runs from; None: this one

    def workload(self, calls: int, threads: int = 1, rate: int = 0) -> list[str]:
        return [str(self.loop), str(calls), str(threads), str(rate), self.func]

    def untraced(self, w: list[str]) -> dict:
        p, _ = run_measured(w, 600)
        return {"result": workload_result(p.stdout), "events": None, "tracer_cpu_s": 0.0}

    def floor(self, w: list[str]) -> dict:
        p, cpu = run_measured(["bpftrace", "-e", floor_program(self.lib, self.func),
                               "-c", " ".join(w)], 600)
        res = workload_result(p.stdout)
        m = re.search(r"@returns: (\d+)", p.stdout)
        return {"result": res, "events": int(m.group(1)) if m else None,
                "tracer_cpu_s": cpu - res["cpu_s"]}

    def trace(self, w: list[str], fmt: str) -> dict:
        out = self.tmp / f"calls.{ {'table': 'txt'}.get(fmt, fmt) }"
        t0 = time.monotonic()
        p, cpu = run_measured(cudaprobe("trace", "--lib", self.lib, "-e", self.func, "-f", fmt,
                                        "-o", str(out), "--force", "--", *w), 600, self.tree)
        wall = time.monotonic() - t0
        res = workload_result(p.stdout)
        events, lost, attach = None, None, None
        if fmt == "jsonl":
            lines = out.read_text().splitlines()
            summary = json.loads(lines[-1])["summary"]
            events, lost = len(lines) - 1, summary["lost_total"]
            attach = summary.get("startup_s")
        elif fmt == "csv":
            events = sum(1 for _ in out.open()) - 1
        m = re.search(r"(\d+) calls in [\d.]+s, \d+ still in flight, (\d+) lost", p.stderr)
        if m:
            events = events if events is not None else int(m.group(1))
            lost = int(m.group(2))
        return {"result": res, "events": events, "lost": lost, "startup_s": attach,
                "tracer_cpu_s": cpu - res["cpu_s"], "wall_s": wall}

    def stats(self, w: list[str]) -> dict:
        p, cpu = run_measured(cudaprobe("stats", "--lib", self.lib, "-e", self.func, "--json",
                                        "-o", "-", "--", *w), 600, self.tree)
        res = workload_result(p.stdout)
        m = re.search(r'"count":\s*(\d+)', p.stdout)
        return {"result": res, "events": int(m.group(1)) if m else None,
                "tracer_cpu_s": cpu - res["cpu_s"]}

    def export(self, w: list[str]) -> dict:
        script = self.tmp / "cuda_events.bt"
        subprocess.run(cudaprobe("export", "bpftrace", "--lib", self.lib, "-e", self.func,
                                 "-o", str(script), "--force"), check=True, capture_output=True)
        p, cpu = run_measured(["bpftrace", str(script), "-c", " ".join(w)], 600)
        res = workload_result(p.stdout)
        events = sum(1 for line in p.stdout.splitlines() if self.func in line)
        return {"result": res, "events": events, "tracer_cpu_s": cpu - res["cpu_s"]}


FORMATS = ("jsonl", "csv", "table")


def overhead(bench: Bench, calls: int, reps: int, formats: tuple[str, ...] = FORMATS,
             export: bool = True, baseline: str | None = None) -> dict:
    configs = {"untraced": bench.untraced, "floor": bench.floor}
    for fmt in formats:
        configs[f"trace-{fmt}"] = lambda w, fmt=fmt: bench.trace(w, fmt)
    if has_command("stats"):
        configs["stats"] = bench.stats
    if baseline:
        base = Bench(bench.lib, bench.loop, bench.tmp, bench.func, baseline)
        for fmt in formats:
            configs[f"trace-{fmt}@base"] = lambda w, fmt=fmt: base.trace(w, fmt)
        configs["stats@base"] = base.stats
    if export and has_command("export", "bpftrace"):
        configs["export"] = bench.export
    runs: dict[str, list[dict]] = {name: [] for name in configs}
    for _ in range(reps):
        for name, fn in configs.items():  # interleaved: each repetition runs all
            runs[name].append(fn(bench.workload(calls)))
    floor_median = statistics.median(r["result"]["ns_per_call"] for r in runs["floor"])
    rows = {}
    for name, rs in runs.items():
        ns = [r["result"]["ns_per_call"] for r in rs]
        rows[name] = {
            "ns_per_call_min": min(ns), "ns_per_call_median": statistics.median(ns),
            "ratio_to_floor": round(statistics.median(ns) / floor_median, 2),
            "calls": rs[0]["result"]["calls"],
            "events": [r["events"] for r in rs],
            "lost": [r.get("lost") for r in rs],
            "tracer_cpu_s": round(statistics.median(r["tracer_cpu_s"] for r in rs), 3),
            "startup_s": rs[0].get("startup_s"),
        }
    return rows


def paced(bench: Bench, rate: int, seconds: int) -> dict:
    r = bench.trace(bench.workload(rate * seconds, 1, rate), "jsonl")
    wall = r["wall_s"]
    return {"rate": rate, "seconds": seconds, "calls": r["result"]["calls"],
            "events": r["events"], "lost": r["lost"],
            "achieved_rate": round(r["result"]["measured_calls"]
                                   / (r["result"]["elapsed_ns"] / 1e9)),
            "tracer_cpu_s": round(r["tracer_cpu_s"], 2),
            "tracer_cores": round(r["tracer_cpu_s"] / wall, 2)}


def threads(bench: Bench, calls: int) -> dict:
    out = bench.tmp / "calls.jsonl"
    # the paced run's file (2 GB at 200k calls/s for 30 s) goes first, and what
    # is still dirty is written back: its writeback would throttle this run's
    # writes (dirty-page balancing) and measure the disk, not the tracer
    out.unlink(missing_ok=True)
    os.sync()
    r = bench.trace(bench.workload(calls, 2), "jsonl")
    per_tid: dict[int, int] = {}
    for line in out.read_text().splitlines()[:-1]:
        call = json.loads(line)
        per_tid[call["tid"]] = per_tid.get(call["tid"], 0) + 1
    return {"calls": r["result"]["calls"], "events": r["events"], "lost": r["lost"],
            "events_per_thread": sorted(per_tid.values()),
            "ns_per_call": r["result"]["ns_per_call"]}


def reader_rate(seconds: float = 3.0) -> dict:
    """The reader process's work per record, on this core: ringbuf.committed over
    16 MiB of 88-byte records (a failed cudaMalloc's), then one pwrite of them
    to a spool file, as the reader's loop does; events/s of CPU time."""
    from cudaprobe.probe.ringbuf import committed  # noqa: PLC0415 - needs the repo on the path

    record = struct.pack("<II", 80, 0) + bytes(80)
    data = memoryview(bytearray(record * ((16 << 20) // len(record))))
    lengths = data.cast("I")
    with tempfile.TemporaryFile() as spool:
        fd, written, records = spool.fileno(), 0, 0
        start = time.process_time()
        while time.process_time() - start < seconds:
            n = committed(lengths, 0, len(data))
            os.pwrite(fd, data[:n], written)
            written, records = written + n, records + n // len(record)
            if written > 1 << 30:  # keep the page cache small
                os.ftruncate(fd, 0)
                written = 0
        cpu = time.process_time() - start
    return {"records": records, "cpu_s": round(cpu, 3), "events_per_s": round(records / cpu)}


THREADS4_SRC = REPO / "tests" / "workloads" / "malloc_free_threads.c"
THREADS4_FORMATS = {"jsonl": "jsonl", "csv": "csv", "chrome": "chrome.json", "table": "txt"}


def threads4(lib: str, tmp: Path, pairs: int = 50_000) -> dict:
    """4 unpaced threads, `pairs` cudaMalloc + cudaFree each, traced in each format."""
    exe = LOOP_BIN.parent / "malloc_free_threads"
    subprocess.run(["gcc", "-O1", f"-I{CUDA}/include", "-o", str(exe), str(THREADS4_SRC),
                    f"-L{CUDA}/lib64", "-lcudart", "-lpthread", f"-Wl,-rpath,{CUDA}/lib64"],
                   check=True)
    out = {}
    for fmt, ext in THREADS4_FORMATS.items():
        path = tmp / f"threads4.{ext}"
        t0 = time.monotonic()
        p, cpu = run_measured(cudaprobe("trace", "--lib", lib, "-e", "cudaMalloc,cudaFree",
                                        "-f", fmt, "-o", str(path), "--force", "--",
                                        str(exe), str(pairs), "4"), 600)
        text = p.stderr if fmt != "table" else path.read_text()
        m = re.search(r"(\d+) calls in [\d.]+s, \d+ still in flight, (\d+) lost", text)
        out[fmt] = {"calls": json.loads(p.stdout)["calls"],
                    "rows": int(m.group(1)) if m else None, "lost": int(m.group(2)) if m else None,
                    "wall_s": round(time.monotonic() - t0, 2), "cpu_s": round(cpu, 2)}
        path.unlink()
    return out


SCENARIOS = ("overhead", "success", "paced", "two_threads", "reader", "threads4")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default=str(next((CUDA / "lib64").glob("libcudart.so.*"))))
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rate", type=int, default=200_000)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--baseline", metavar="DIR", type=lambda d: str(Path(d).resolve()),
                    help="another source tree: its trace and stats run beside this one's")
    ap.add_argument("--only", default=",".join(SCENARIOS),
                    help=f"comma-separated scenarios to run, of: {','.join(SCENARIOS)}")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if only - set(SCENARIOS):
        print(f"bench: unknown scenario in --only: {', '.join(sorted(only - set(SCENARIOS)))}",
              file=sys.stderr)
        return 2
    if os.geteuid() != 0 or not shutil.which("bpftrace"):
        print("bench: needs root and bpftrace (run scripts/setup)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        lib = private_copy(os.path.realpath(args.lib), Path(tmp))
        bench = Bench(lib, build_loop(), Path(tmp))
        results: dict = {
            "machine": {"kernel": os.uname().release, "cpus": os.cpu_count(),
                        "lib": os.path.realpath(args.lib), "probed_copy": lib},
        }
        if "overhead" in only:
            results["overhead"] = overhead(bench, args.calls, args.reps, baseline=args.baseline)
        if "success" in only:
            # the loop's cudaMalloc calls fail without a GPU, and a failed call's
            # out-parameter is not read: the same, on a call that succeeds and whose
            # out-parameter the exit probe reads
            ok = Bench(str(bench.loop), bench.loop, Path(tmp), "cudaGetDeviceCount")
            results["overhead_success"] = overhead(ok, args.calls, args.reps, ("jsonl",),
                                                   export=False, baseline=args.baseline)
        if "paced" in only:
            results["paced"] = paced(bench, args.rate, args.seconds)
        if "two_threads" in only:
            results["two_threads"] = threads(bench, args.calls)
        if "reader" in only:
            results["reader"] = reader_rate()
        if "threads4" in only:
            results["threads4"] = threads4(lib, Path(tmp))
    for key, title in (("overhead", "cudaMalloc (fails: cudaErrorInsufficientDriver)"),
                       ("overhead_success", "stand-in cudaGetDeviceCount (succeeds: out read)")):
        if key not in results:
            continue
        print(title)
        print(f"{'config':<17} {'min ns':>8} {'median':>8} {'x floor':>8} {'calls':>8} "
              f"{'events':>22} {'lost':>16} {'cpu s':>7}")
        for name, r in results[key].items():
            print(f"{name:<17} {r['ns_per_call_min']:>8.0f} {r['ns_per_call_median']:>8.0f} "
                  f"{r['ratio_to_floor']:>8.2f} {r['calls']:>8} {str(r['events']):>22} "
                  f"{str(r['lost']):>16} {r['tracer_cpu_s']:>7}")
    for key in ("paced", "two_threads", "reader", "threads4"):
        if key in results:
            print(f"{key}:", json.dumps(results[key]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
