"""What `serve --duty` costs a running job, each of its slices measured
against the job's own steps just before and just after it.

Windows of serve and of no serve, seconds apart, differ by more than 2%
from the host alone (duty_cost.py: untraced windows of one run from 2.12 to
2.63 ms a step). A duty-cycled serve costs the job only around its slices
(the links put in, the probes hit, the links taken out); the job's steps a
second before and after each slice ran on the same host, under the same
load, and are its baseline.

When the probes are in is read from the job itself, not from serve: the
first byte of the probed function (FUNCTION, cuLaunchKernel) in the job's
memory, every half millisecond, through /proc/PID/mem: a breakpoint there
while the probes are in, the library's own byte while they are out.

Per slice: its excess, the sum over the steps that ended from GUARD before
the breakpoint appeared to GUARD after it went (the links going in and out,
and the steps cut by them) of each step's time less the mean step of its
baseline (the steps ending within BASE seconds before and after that
region, none nearer than GUARD to any slice). The cost is the slices'
excess over the time the job ran beside serve (the excess of the slices
whose baseline was too short, taken as the mean of the others), with a 95%
interval from the slices' spread. The same is computed at random places
between slices (placebos: no probes there), which is what the method reads
where there is nothing to find. While a slice's probes are in, the job's
mean step against its baseline is what exact counting costs.

    python3 scripts/gpu/slice_cost.py --lib LIBCUDA --out FILE [--workload mlp]
        [--seconds 120] [--duty 2%] [--duty-period 5]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from cudaprobe.targets.elfsyms import read_symbols

TORCH_PY = "/opt/torch/.venv/bin/python"
GUARD = 0.3  # s around a slice counted in its region, and kept out of any baseline
BASE = 1.0  # s of steps each side of a region: its baseline
MIN_BASE = 20  # steps a baseline needs
SAMPLE_S = 0.0005
T95 = 1.96  # (tens of slices: the normal's quantile)


def probe_address(pid: int, lib: str, function: str) -> int:
    """Where FUNCTION's first instruction is in the process's copy of LIB."""
    real = os.path.realpath(lib)
    inode = os.stat(real).st_ino
    offset = read_symbols(real).functions[function]
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) < 6 or int(parts[4]) != inode:
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            file_off = int(parts[2], 16)
            if file_off <= offset < file_off + end - start:
                return start + offset - file_off
    raise SystemExit(f"{real} holds no {function} mapped in pid {pid}")


class Breakpoints(threading.Thread):
    """The times the byte at `addr` of process `pid` changed from its own and back:
    the intervals [in, out) during which the probes were in."""

    def __init__(self, pid: int, addr: int) -> None:
        super().__init__(daemon=True)
        self.fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        self.addr = addr
        self.own = os.pread(self.fd, 1, addr)
        self.changes: list[tuple[float, bool]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        probed = False
        while not self.stop.is_set():
            try:
                byte = os.pread(self.fd, 1, self.addr)
            except OSError:
                return
            now = time.monotonic()
            if (byte != self.own) != probed:
                probed = not probed
                self.changes.append((now, probed))
            time.sleep(SAMPLE_S)

    def intervals(self) -> list[tuple[float, float]]:
        out, began = [], None
        for t, probed in self.changes:
            if probed:
                began = t
            elif began is not None:
                out.append((began, t))
                began = None
        return out


def tree_cpu_s(root: int) -> float:
    """User and system seconds of `root` and its descendants now."""
    parent, cpu = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(name)] = int(fields[1])
        cpu[int(name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid, seconds in cpu.items():
        p = pid
        while p and p != root:
            p = parent.get(p, 0)
        if p == root:
            total += seconds
    return total


def excess(steps: list[tuple[float, float]], begin: float, end: float,
           slices: list[tuple[float, float]]) -> tuple[float, float, int] | None:
    """(excess s, baseline mean s, steps) of the steps ending in (begin - GUARD,
    end + GUARD], against those ending within BASE either side whose ends are
    no nearer than GUARD to a slice; None where that baseline is too short."""
    lo, hi = begin - GUARD, end + GUARD
    region = [dt for e, dt in steps if lo < e <= hi]

    def clean(e: float) -> bool:
        return all(not (a - GUARD < e <= b + GUARD) for a, b in slices)
    base = [dt for e, dt in steps
            if (lo - BASE < e <= lo or hi < e <= hi + BASE) and clean(e)]
    if len(base) < MIN_BASE or not region:
        return None
    mean = statistics.fmean(base)
    return sum(region) - len(region) * mean, mean, len(region)


def summary(name: str, values: list[float], span_s: float, slices: int) -> tuple[str, float]:
    """The cost, as a share of the run, from each slice's excess: their mean times
    the slices in the run, over its span, with a 95% interval."""
    mean = statistics.fmean(values)
    half = T95 * statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    share = 100 * mean * slices / span_s
    lo, hi = 100 * (mean - half) * slices / span_s, 100 * (mean + half) * slices / span_s
    return (f"{name}: {share:+.3f}% of the job's time (95% interval {lo:+.3f}% to {hi:+.3f}%), "
            f"from {len(values)} of {slices} slices, excess "
            f"{1e3 * mean:+.3f} ms a slice"), hi


def gpu_recorded() -> tuple[float, float]:
    """serve's kernels counted and their GPU seconds, all kernels together."""
    text = urllib.request.urlopen("http://127.0.0.1:9468/metrics", timeout=30).read().decode()
    count = seconds = 0.0
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.name == "cudaprobe_gpu_kernel_duration_seconds_count":
                count += sample.value
            elif sample.name == "cudaprobe_gpu_kernel_duration_seconds_sum":
                seconds += sample.value
    return count, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workload", default="mlp")
    ap.add_argument("--python", default=TORCH_PY)
    ap.add_argument("--workload-script", default="benchmarks/torch_workloads.py")
    ap.add_argument("--function", default="cuLaunchKernel")
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--duty", default="2%")
    ap.add_argument("--duty-period", default="5")
    ap.add_argument("--api", default="driver")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="one more argument of serve's (--serve-arg=--gpu-time)")
    a = ap.parse_args()
    tag = f"/tmp/slice-cost-{os.getpid()}"
    log, ready, go, stop = (f"{tag}.steps", f"{tag}.ready", f"{tag}.go", f"{tag}.stop")
    work = subprocess.Popen([a.python, a.workload_script, a.workload, "--seconds",
                             str(a.seconds + 120), "--warmup", "200", "--ready", ready,
                             "--go", go, "--log", log, "--stop", stop],
                            stdout=subprocess.PIPE, text=True)
    while not os.path.exists(ready):
        if work.poll() is not None:
            raise SystemExit("the workload ended before it was ready")
        time.sleep(0.1)
    sampler = Breakpoints(work.pid, probe_address(work.pid, a.lib, a.function))
    sampler.start()
    open(go, "w").close()
    time.sleep(2)
    err = open(f"{tag}.serve.err", "w")
    serve = subprocess.Popen([sys.executable, "-m", "cudaprobe", "serve", "--prometheus",
                              "127.0.0.1:9468", "--api", a.api, "--lib", a.lib, "--duty", a.duty,
                              "--duty-period", a.duty_period, *a.serve_arg],
                             stdout=subprocess.DEVNULL, stderr=err)
    while "serving Prometheus" not in open(f"{tag}.serve.err").read():
        if serve.poll() is not None:
            raise SystemExit(f"serve did not start: {open(f'{tag}.serve.err').read()}")
        time.sleep(0.1)
    began, cpu0 = time.monotonic(), tree_cpu_s(serve.pid)
    time.sleep(a.seconds)
    ended, cpu1 = time.monotonic(), tree_cpu_s(serve.pid)
    gpu = gpu_recorded() if "--gpu-time" in a.serve_arg else None
    serve.send_signal(signal.SIGINT)
    serve.wait(timeout=60)
    time.sleep(1)
    sampler.stop.set()
    sampler.join()
    open(stop, "w").close()
    out = work.communicate()[0].strip()
    steps = [tuple(map(float, line.split())) for line in open(log)]
    for f in (log, ready, go, stop):
        os.unlink(f)
    slices = [(b, e) for b, e in sampler.intervals() if began <= b and e <= ended]
    lines = [f"workload: {out}"]
    if not slices:
        lines.append("no slice was seen")
        open(a.out, "a").write("\n".join(lines) + "\n")
        raise SystemExit("\n".join(lines))
    width = statistics.fmean([e - b for b, e in slices])
    lines.append(f"serve --api {a.api} --duty {a.duty} --duty-period {a.duty_period}"
                 f"{''.join(' ' + x for x in a.serve_arg)}, "
                 f"{a.seconds:g} s beside the job; probes in {len(slices)} times (read in the "
                 f"job at {a.function}), {width * 1e3:.1f} ms each on average")
    span = ended - began
    of_slice = [excess(steps, b, e, slices) for b, e in slices]  # None: baseline too short
    measured = [x for x in of_slice if x is not None]
    text, _hi = summary("cost", [x[0] for x in measured], span, len(slices))
    lines.append(text)
    # the steps wholly inside the slices, against the same baselines: exact counting's cost
    inside = []
    for (b, e), x in zip(slices, of_slice):
        ins = [dt for end, dt in steps if b <= end - dt and end <= e]
        if x is not None and ins:
            inside.append(statistics.fmean(ins) / x[1] - 1)
    if inside:
        lines.append(f"while the probes were in: steps {100 * statistics.fmean(inside):+.2f}% "
                     f"slower than their baselines ({len(inside)} slices with whole steps "
                     "inside): exact counting's cost")
    rng = random.Random(1)
    placebos = []
    for _ in range(len(slices) * 20):
        if len(placebos) >= len(slices):
            break
        b = rng.uniform(began + BASE + GUARD, ended - width - BASE - GUARD)
        if any(b - 2 * GUARD - BASE < e and b + width + 2 * GUARD + BASE > s for s, e in slices):
            continue
        x = excess(steps, b, b + width, slices)
        if x is not None:
            placebos.append(x[0])
    if len(placebos) > 1:
        lines.append(summary("placebo (no probes there)", placebos, span, len(slices))[0])
    # what the job paid all along, not around the slices: with --gpu-time, CUPTI in it
    # from the library's injection on (the slices' method reads none of that)
    before = [dt for end, dt in steps if began - 2.0 <= end < began]
    beside = [dt for end, dt in steps if began + 5.0 <= end <= ended]
    if before and beside:
        lines.append(f"steps: {1e3 * statistics.median(before):.3f} ms (median) in the 2 s "
                     f"before serve, {1e3 * statistics.median(beside):.3f} ms beside it from "
                     f"5 s on ({statistics.median(beside) / statistics.median(before) - 1:+.1%}"
                     "): a cost all along, such as --gpu-time's CUPTI")
    if gpu is not None:  # the library was in and recording: CUPTI's cost is all along, in
        # the steps beside serve against those before it, not in the slices' excess
        said = [t for t in open(f"{tag}.serve.err").read().splitlines() if "GPU-time" in t]
        lines.append(f"--gpu-time: {gpu[0]:.0f} kernels counted ({gpu[1]:.3f} GPU s, all "
                     f"along, unscaled) at the end; CUPTI's cost is in the steps beside serve, "
                     f"not in the slices' excess; serve said: {'; '.join(said[:3])}")
    lines.append(f"serve's own CPU: {cpu1 - cpu0:.2f} s over {span:.0f} s "
                 f"({100 * (cpu1 - cpu0) / span:.2f}% of one core of {os.cpu_count()})")
    with open(a.out, "a") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
