"""Runs `cudaprobe serve` with LineJoin's clock alignment and span checks
printed to $OUT/align-debug.txt (a diagnosis of serve --gpu-time --py-stacks
on a node): what waits, which threads and functions its records name, the
launches kept of those threads, and each record's nearest launch."""
import bisect
import os
import time

from cudaprobe.analysis import gpulines
from cudaprobe.cli import main

out = open(os.path.join(os.environ.get("OUT", "/tmp"), "align-debug.txt"), "w")
orig_align = gpulines.LineJoin._align
orig_api = gpulines.LineJoin.api
calls = {"align": 0, "api": 0, "in_span": 0, "unaligned_pid": 0}


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


gpulines.LineJoin._align = _align
gpulines.LineJoin.api = api
main(prog_name="cudaprobe")
