"""Borrowed stacks on the GPU: from a `trace --py-stacks --gpu-time` JSONL of
benchmarks/pystacks_torch.py, the share of the kernels' GPU time with no
Python line, before (the calling thread's own stack) and now (borrowed
stacks too); every borrowed call's line against the workload's own marker
of where backward() is called (`# LINE:backward`): the autograd threads'
launches are lent by the main thread, waiting in that call.

  python3 borrowed_check.py TRACE.jsonl WORKLOAD.py
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter


def user_line(stack: list[dict], workload: str) -> int | None:
    for frame in stack:  # innermost first: the first frame of the workload's file
        if frame.get("file", "").endswith(workload):
            return frame.get("line")
    return None


def main() -> int:
    trace, workload = sys.argv[1], sys.argv[2]
    marks = {m.group(1): i for i, line in enumerate(open(workload), 1)
             if (m := re.search(r"# LINE:(\w+)", line))}
    name = workload.rsplit("/", 1)[-1]
    total = own = lent = 0
    lines: Counter = Counter()
    because: Counter = Counter()
    bad = []
    for raw in open(trace):
        row = json.loads(raw)
        gpu = row.get("gpu")
        if gpu is None or gpu.get("kind") != "kernel":
            continue
        ns = gpu["duration_ns"]
        total += ns
        stack = row.get("py_stack") or []
        line = user_line(stack, name)
        if line is None:
            continue
        if "py_stack_borrowed" in row:
            lent += ns
            lines[line] += ns
            because[row["py_stack_borrowed"].get("because")] += 1
            if line != marks["backward"]:
                bad.append((row["process"], row["event"], line))
        else:
            own += ns
    if not total:  # (no GPU time: the launches' calls, counted instead)
        print("no kernel with GPU time; by calls instead:")
        return by_calls(trace, name, marks["backward"])
    none = total - own - lent
    print(f"kernels' GPU time {total / 1e6:.2f} ms: own stack {100 * own / total:.1f}%, "
          f"borrowed {100 * lent / total:.1f}%, no Python line {100 * none / total:.2f}% "
          f"(before borrowing: {100 * (none + lent) / total:.1f}%)")
    print(f"borrowed, by why: {dict(because)}; their lines: "
          f"{ {ln: round(ns / 1e6, 2) for ln, ns in lines.items()} } (backward() is line "
          f"{marks['backward']}); on another line: {len(bad)} {bad[:3]}")
    ok = none / total < 0.01 and not bad
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


def by_calls(trace: str, name: str, backward: int) -> int:
    calls = own = lent = 0
    bad = []
    for raw in open(trace):
        row = json.loads(raw)
        if row.get("event", "").startswith("cudaLaunch"):
            calls += 1
            line = user_line(row.get("py_stack") or [], name)
            if line is None:
                continue
            if "py_stack_borrowed" in row:
                lent += 1
                if line != backward:
                    bad.append((row["process"], line))
            else:
                own += 1
    none = calls - own - lent
    print(f"{calls} launches: own stack {own}, borrowed {lent} ({len(bad)} not on backward()'s "
          f"line {backward}), no Python line {none} ({100 * none / max(calls, 1):.2f}%)")
    ok = calls and none / calls < 0.01 and not bad
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
