"""Checks `cudaprobe trace --gpu-time` against independent timings, for
scripts/gpu/check-gputime.sh. Plain Python: no torch, no cudaprobe import.

  gputime_compare.py regions TRACE.jsonl PROGRAM.out [--markers events|sleep]
                     [--tolerance 5] [--json OUT]
      PROGRAM.out: {"op", "ms"} lines, one per region timed with CUDA events, in
      the order issued (benchmarks/gputime_torch.py, multistream.cu streams).
      In the trace the regions are found per thread, in call order:
        events  the calls between each pair of event records: cudaEventRecord*
                (cudaEventRecord, cudaEventRecordWithFlags, _ptsz...), or where a
                thread has none of those, the driver's cuEventRecord* (a runtime
                record makes a driver one inside it: one kind only, or each would
                count twice); multistream.cu
        sleep   the calls after each launch of a sleep kernel (torch.cuda._sleep's
                spin_kernel, given before each op so that the op's kernels are
                queued before its first event runs) up to the next one or a
                synchronize: the op's own kernels, whatever function PyTorch
                records its events with (2.11's is not cudaEventRecord);
                gputime_torch.py
      A region's GPU time is its calls' `gpu` work, first start to last end. Per
      op: regions, median and worst error against the event time, and how many
      are within the tolerance. Exit 1 when an op's median error is beyond it.
  gputime_compare.py drift TRACE.jsonl PROGRAM.out [--json OUT]
      PROGRAM.out: multistream.cu drift's {"marker", "before_ns", "after_ns"};
      the trace's launches of marker_kernel, in order. Each marker kernel must
      run inside its host window (CLOCK_MONOTONIC before the launch, after the
      synchronize); the offset of its GPU start from `before_ns`, at the first
      and the last marker, is the drift of the GPU timeline against the host's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys


def load(path: str) -> list[dict]:
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


EVENT_MARKERS = ("cudaEventRecord", "cuEventRecord")  # runtime first: see the docstring
SLEEP_KERNELS = ("spin_kernel",)  # at::cuda::sleep's kernel (torch.cuda._sleep)


def _calls(trace: list[dict]) -> dict[int, list[dict]]:
    """The traced calls of each thread, in call order."""
    threads: dict[int, list[dict]] = {}
    for r in sorted((r for r in trace if "event" in r and "summary" not in r),
                    key=lambda r: r["ts_ns"]):
        threads.setdefault(r["tid"], []).append(r)
    return threads


def regions(trace: list[dict]) -> list[list[dict]]:
    """The calls between each pair of event records, per thread, in call order."""
    out = []
    for calls in _calls(trace).values():
        for prefix in EVENT_MARKERS:
            if any(r["event"].startswith(prefix) for r in calls):
                break
        else:
            continue
        inside: list[dict] | None = None
        for r in calls:
            if r["event"].startswith(prefix):
                if inside is None:
                    inside = []
                else:
                    out.append(inside)
                    inside = None
            elif inside is not None:
                inside.append(r)
    return out


def _sleep_kernel(r: dict) -> bool:
    name = str(r.get("args", {}).get("func_name", ""))
    return any(k in name for k in SLEEP_KERNELS)


def sleep_regions(trace: list[dict]) -> list[list[dict]]:
    """The calls after each sleep-kernel launch up to the next one or a
    synchronize, per thread; the launch's nested driver call (the same kernel
    name) is part of its marker, and a stretch without a launch is no region."""
    out = []
    for calls in _calls(trace).values():
        inside: list[dict] | None = None
        for r in calls:
            if _sleep_kernel(r) or "Synchronize" in r["event"]:
                if inside and any(c.get("category") == "kernel" or "gpu" in c
                                  for c in inside):
                    out.append(inside)
                inside = [] if _sleep_kernel(r) else None
            elif inside is not None:
                inside.append(r)
        if inside and any(c.get("category") == "kernel" or "gpu" in c for c in inside):
            out.append(inside)
    return out


MARKERS = {"events": (regions, "calls named " + "* or ".join(EVENT_MARKERS)
                      + "* (are they in the catalogue, and selected by -e?)"),
           "sleep": (sleep_regions, "launches of a kernel named like " + ", ".join(
               SLEEP_KERNELS) + " (torch.cuda._sleep's)")}


def gpu_ms(region: list[dict]) -> float | None:
    work = [r["gpu"] for r in region if "gpu" in r]
    if not work:
        return None
    start = min(w["start_ns"] for w in work)
    end = max(w["start_ns"] + w["duration_ns"] for w in work)
    return (end - start) / 1e6


def compare_regions(trace: list[dict], program: list[dict], tolerance: float,
                    markers: str = "events") -> dict:
    find, looked_for = MARKERS[markers]
    found = find(trace)
    result: dict = {"regions_program": len(program), "regions_trace": len(found),
                    "markers": markers, "ops": {}}
    if not found:
        result["problem"] = f"no regions in the trace: no {looked_for}"
        return result
    if len(found) != len(program):
        result["problem"] = "the trace and the program do not have the same regions"
        return result
    per_op: dict[str, list[float]] = {}
    missing = 0
    for want, region in zip(program, found):
        got = gpu_ms(region)
        if got is None or want["ms"] <= 0:
            missing += 1
            continue
        per_op.setdefault(want["op"], []).append(100 * (got - want["ms"]) / want["ms"])
    result["regions_without_gpu_time"] = missing
    for op, errors in per_op.items():
        result["ops"][op] = {
            "regions": len(errors), "median_error_pct": round(statistics.median(errors), 3),
            "worst_error_pct": round(max(errors, key=abs), 3),
            "within_tolerance": sum(abs(e) <= tolerance for e in errors)}
    result["pass"] = bool(per_op) and not missing and all(
        abs(o["median_error_pct"]) <= tolerance for o in result["ops"].values())
    return result


def compare_drift(trace: list[dict], program: list[dict]) -> dict:
    markers = [r for r in sorted((r for r in trace if "gpu" in r), key=lambda r: r["ts_ns"])
               if "marker_kernel" in str(r.get("args", {}).get("func_name", ""))]
    # the warm-up launch comes first, unprinted
    markers = markers[len(markers) - len(program):] if len(markers) >= len(program) else []
    result: dict = {"markers_program": len(program), "markers_trace": len(markers)}
    if not markers:
        result["problem"] = "fewer marker launches in the trace than the program printed"
        return result
    offsets, outside = [], 0
    for want, row in zip(program, markers):
        start = row["gpu"]["start_ns"]
        end = start + row["gpu"]["duration_ns"]
        outside += not (want["before_ns"] <= start and end <= want["after_ns"])
        offsets.append(start - want["before_ns"])
    result.update(outside_host_window=outside, first_offset_us=offsets[0] / 1e3,
                  last_offset_us=offsets[-1] / 1e3,
                  drift_us=(offsets[-1] - offsets[0]) / 1e3,
                  offset_min_us=min(offsets) / 1e3, offset_max_us=max(offsets) / 1e3,
                  seconds=(program[-1]["before_ns"] - program[0]["before_ns"]) / 1e9)
    result["pass"] = outside == 0
    return result


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["regions", "drift"])
    p.add_argument("trace")
    p.add_argument("program")
    p.add_argument("--markers", choices=sorted(MARKERS), default="events",
                   help="regions: what bounds them in the trace")
    p.add_argument("--tolerance", type=float, default=5.0, help="percent")
    p.add_argument("--json")
    a = p.parse_args()
    try:
        trace, program = load(a.trace), load(a.program)
    except (OSError, ValueError) as e:
        print(json.dumps({"problem": f"cannot read the inputs: {e}", "pass": False}))
        return 1
    if a.mode == "regions":
        result = compare_regions(trace, program, a.tolerance, a.markers)
    else:
        result = compare_drift(trace, program)
    text = json.dumps(result, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0 if result.get("pass") else 1


if __name__ == "__main__":
    sys.exit(main())
