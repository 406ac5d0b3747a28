"""Runs `cudaprobe serve` with LineJoin's clock alignment and span checks
printed to $OUT/align-debug.txt (a diagnosis of serve --gpu-time --py-stacks
on a node): what waits, which threads and functions its records name, the
launches kept of those threads, and each record's nearest launch. Every 5 s
$OUT/node-debug.txt gets a line of what the join and the metrics did so far:
the GPU time read and counted (raw, unscaled), kernels counted twice, launches
traced outside the slices, kernels counted whose launch lies outside, the
slices' count and last times, the duty thread alive; and at the end the lines'
GPU time by kernel, and each slice's counted time."""
import bisect
import os
import threading
import time
import traceback

from cudaprobe.analysis import gpulines, metrics
from cudaprobe.cli import main
from cudaprobe.sessions import duty

out_dir = os.environ.get("OUT", "/tmp")
out = open(os.path.join(out_dir, "align-debug.txt"), "w")
node = open(os.path.join(out_dir, "node-debug.txt"), "w")
orig_align = gpulines.LineJoin._align
orig_api = gpulines.LineJoin.api
calls = {"align": 0, "api": 0, "in_span": 0, "unaligned_pid": 0}
joins: list = []
stats = {"read_ns": 0, "read_n": 0, "counted_ns": 0, "counted_n": 0, "dup_n": 0, "dup_ns": 0,
         "launch_in": 0, "launch_out": 0, "line_in_ns": 0, "line_out_ns": 0,
         "line_none_span": 0, "outside": 0, "waiting": 0, "none": 0, "launch": 0}
seen: set = set()
by_line_kernel: dict = {}
by_span: dict = {}  # slice start -> [kernels counted (line) raw ns, launches]
began = time.monotonic()


def span_of(join, ts):
    """The slice (its start) whose [start, end] holds ts, or None."""
    for start, end in reversed(list(join._spans or ())):
        if ts >= start and (not end or ts <= end):
            return start
        if ts > (end or ts):
            return None
    return None


def api(self, pid, correlation, a):
    calls["api"] += 1
    if (not a.function or "Launch" in a.function) and (self._spans is None or self._in_span(a)):
        calls["in_span"] += 1
        if pid in self.cupti_clock and pid not in self._shift:
            calls["unaligned_pid"] += 1
    return orig_api(self, pid, correlation, a)


def _align(self, pid):
    calls["align"] += 1
    n = calls["align"]
    waiting = self._unaligned[pid]
    if len(waiting) >= gpulines.ALIGN_MIN_VOTES and (n <= 5 or n % 100 == 0):
        print(f"== align {n} at {time.monotonic():.3f}: pid {pid}, waiting {len(waiting)}, "
              f"calls {calls}, spans {self._spans[-3:] if self._spans else self._spans}",
              file=out)
        tids = {}
        for _, a in waiting:
            tids[(a.tid, a.function)] = tids.get((a.tid, a.function), 0) + 1
        print("  records by (tid, function):", sorted(tids.items(), key=lambda x: -x[1])[:6],
              file=out)
        threads = {k: t for k, t in self._threads.items() if k[0] == pid}
        print("  launches kept by thread:", [(k[1], len(t), t[0].ts_ns, t[-1].ts_ns,
                                             sorted({c.event for c in t})[:4])
                                            for k, t in threads.items()][:6], file=out)
        for _, a in waiting[:: max(1, len(waiting) // 6)][:6]:
            t = threads.get((pid, a.tid))
            if not t:
                print(f"  record {a}: no launch of its thread", file=out)
                continue
            starts = [c.ts_ns for c in t]
            i = bisect.bisect_left(starts, a.start_ns)
            near = [(c.event, c.ts_ns - a.start_ns, c.duration_ns) for c in t[max(0, i - 2):i + 2]]
            print(f"  record {a}: nearest launches (event, ts - record start, duration) {near}",
                  file=out)
        out.flush()
    r = orig_align(self, pid)
    if pid in self._shift and not getattr(self, "_said_shift", False):
        self._said_shift = True
        print(f"== aligned pid {pid} at attempt {n}: shift {self._shift[pid]}", file=out)
        out.flush()
    return r


orig_init = gpulines.LineJoin.__init__


def join_init(self, *args, **kw):
    orig_init(self, *args, **kw)
    joins.append(self)


orig_launch = gpulines.LineJoin.launch


def launch(self, call, weight, process):
    if self._spans is not None:
        start = span_of(self, call.ts_ns)
        stats["launch_in" if start is not None else "launch_out"] += 1
        if start is not None:
            by_span.setdefault(start, [0, 0])[1] += 1
    return orig_launch(self, call, weight, process)


orig_launch_of = gpulines.LineJoin.launch_of


def launch_of(self, work):
    r = orig_launch_of(self, work)
    stats["outside" if r is gpulines.OUTSIDE else "waiting" if r is gpulines.WAITING
          else "none" if r is None else "launch"] += 1
    return r


orig_add_gpu = metrics.CallMetrics.add_gpu


def add_gpu(self, work):
    work = list(work)
    for w in work:
        if w.kind == "kernel":
            stats["read_ns"] += w.duration_ns
            stats["read_n"] += 1
    return orig_add_gpu(self, work)


orig_count_kernel = metrics.CallMetrics._count_kernel


def count_kernel(self, w):
    stats["counted_ns"] += w.duration_ns
    stats["counted_n"] += 1
    key = (w.pid, w.correlation, w.start_ns)
    if key in seen:
        stats["dup_n"] += 1
        stats["dup_ns"] += w.duration_ns
    seen.add(key)
    return orig_count_kernel(self, w)


orig_count_line = metrics.CallMetrics._count_line


def count_line(self, w, launch):
    join = self._lines
    start = span_of(join, launch.ts_ns) if join is not None and join._spans is not None else None
    if start is None:
        stats["line_out_ns"] += w.duration_ns
    else:
        stats["line_in_ns"] += w.duration_ns
        by_span.setdefault(start, [0, 0])[0] += w.duration_ns
    key = (str(launch.line)[-48:], launch.event, (w.name or "")[:40])
    by_line_kernel[key] = by_line_kernel.get(key, 0) + w.duration_ns
    return orig_count_line(self, w, launch)


orig_run = duty.DutyCycle._run


def run(self, attacher):
    try:
        orig_run(self, attacher)
        print(f"== duty thread returned at {time.monotonic() - began:.1f} s", file=node)
    except BaseException:
        print(f"== duty thread raised at {time.monotonic() - began:.1f} s:\n"
              + traceback.format_exc(), file=node)
        raise
    finally:
        node.flush()


def report() -> None:
    while True:
        time.sleep(5)
        join = joins[-1] if joins else None
        spans = list(join._spans) if join is not None and join._spans is not None else None
        duty_alive = any(t.name == "cudaprobe-duty" for t in threading.enumerate())
        print(f"{time.monotonic() - began:7.1f} s {stats} spans {len(spans or ())} "
              f"last {spans[-2:] if spans else spans} now {time.monotonic_ns()} "
              f"shift {join._shift if join else None} duty {duty_alive} "
              f"threads {len(threading.enumerate())}", file=node)
        node.flush()


def at_end() -> None:
    print("== lines' raw GPU ns by (line, launch event, kernel), top 30", file=node)
    for k, v in sorted(by_line_kernel.items(), key=lambda kv: -kv[1])[:30]:
        print(f"  {v / 1e9:9.4f} s {k}", file=node)
    print("== each slice's counted raw ns (line) and launches traced", file=node)
    for start, (ns, n) in sorted(by_span.items()):
        print(f"  {start} {ns / 1e6:9.2f} ms {n}", file=node)
    node.flush()


gpulines.LineJoin._align = _align
gpulines.LineJoin.api = api
gpulines.LineJoin.__init__ = join_init
gpulines.LineJoin.launch = launch
gpulines.LineJoin.launch_of = launch_of
metrics.CallMetrics.add_gpu = add_gpu
metrics.CallMetrics._count_kernel = count_kernel
metrics.CallMetrics._count_line = count_line
duty.DutyCycle._run = run
threading.Thread(target=report, daemon=True).start()
try:
    main(prog_name="cudaprobe")
finally:
    at_end()
