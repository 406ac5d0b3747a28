"""Checks the GPU work `trace --pid P --gpu-time` joined to its rows against
what the GPU itself says: a kernel starts after the call that launched it
began, kernels of one stream start in the order of their launches, and (with
a Chrome trace) the kernel CUPTI names is the one the row's launch names.

Usage: python3 join_check.py TRACE.jsonl [TRACE.chrome.json]
Prints one summary line per check."""

from __future__ import annotations

import bisect
import json
import sys
from collections import defaultdict


def jsonl(path: str) -> None:
    rows = [json.loads(line) for line in open(path) if line.startswith('{"time_ms"')]
    launches = [r for r in rows if r["event"] in ("cudaLaunchKernel", "cuLaunchKernel",
                                                  "cuLaunchKernelEx", "cudaLaunchKernelExC")]
    joined = [r for r in rows if "gpu" in r]
    first = min((r["ts_ns"] for r in joined), default=None)
    after = [r for r in launches if first is not None and r["ts_ns"] >= first]
    with_gpu = [r for r in after if "gpu" in r]
    before = [r for r in joined if r["gpu"]["start_ns"] < r["ts_ns"]]
    by_stream = defaultdict(list)
    for r in joined:
        if r["gpu"]["kind"] == "kernel" and r["gpu"].get("count", 1) == 1:
            by_stream[(r["pid"], r["gpu"]["stream"])].append((r["ts_ns"], r["gpu"]["start_ns"]))
    out_of_order = 0
    for calls in by_stream.values():
        calls.sort()
        starts = [s for _, s in calls]
        out_of_order += sum(1 for a, b in zip(starts, starts[1:]) if b < a)
    print(f"rows {len(rows)}, launch rows {len(launches)}; rows with GPU work {len(joined)}")
    print(f"launch rows after the first joined one: {len(after)}, with GPU work "
          f"{len(with_gpu)} ({100 * len(with_gpu) / max(1, len(after)):.2f}%)")
    print(f"GPU work that starts before its call began: {len(before)}")
    print(f"kernels of one stream out of their launches' order: {out_of_order} "
          f"(streams {len(by_stream)})")


def chrome(path: str) -> None:
    events = json.load(open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    slices = [e for e in events if e.get("ph") == "X"]
    by_thread = defaultdict(list)
    for e in slices:
        if not str(e.get("cat", "")).startswith("gpu"):
            by_thread[(e["pid"], e["tid"])].append(e)
    for v in by_thread.values():
        v.sort(key=lambda e: e["ts"])
    flows = [e for e in events if e.get("cat") == "launch_to_gpu"]
    starts = {e["id"]: e for e in flows if e.get("ph") == "s"}
    ends = {e["id"]: e for e in flows if e.get("ph") == "f"}
    gpu = {(e["pid"], e["tid"], e["ts"]): e for e in slices
           if str(e.get("cat", "")).startswith("gpu,kernel")}
    same = differ = unnamed = 0
    examples = []
    for fid, s in starts.items():
        f = ends.get(fid)
        k = gpu.get((f["pid"], f["tid"], f["ts"])) if f else None
        thread = by_thread.get((s["pid"], s["tid"]), [])
        i = bisect.bisect_right([e["ts"] for e in thread], s["ts"]) - 1
        call = thread[i] if i >= 0 else None
        ours = (call or {}).get("args", {}).get("func_name")
        theirs = (k or {}).get("args", {}).get("func_name")
        if not ours or not theirs:
            unnamed += 1
        elif ours == theirs:
            same += 1
        else:
            differ += 1
            if len(examples) < 3:
                examples.append((ours[:80], theirs[:80]))
    print(f"chrome: launch->kernel flows {len(starts)}: the same kernel name on both ends "
          f"{same}, different {differ}, a name missing {unnamed}")
    for e in examples:
        print("  differ:", e)


if __name__ == "__main__":
    jsonl(sys.argv[1])
    if len(sys.argv) > 2:
        chrome(sys.argv[2])
