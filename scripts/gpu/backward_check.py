"""Backward kernels on their forward line, on the GPU: from a `trace --py-stacks
--gpu-time` JSONL of benchmarks/backward_torch.py, the share of the kernels'
GPU time with no Python line, and how the backward kernels' GPU time falls on
the forward lines (py_stack_forward), against PyTorch's own link of the same
(torch.profiler's sequence numbers, written by `backward_torch.py --profile`):
the share of backward GPU time on the same line in both (the sum over lines
of the smaller share) must be at least 99%. torch.profiler's stacks name a
frame's function by its first line, not the line running: the lines are
compared as the functions holding them (the workload puts each marked
forward op in a function of its own).

  python3 backward_check.py TRACE.jsonl WORKLOAD.py ORACLE.json
"""

from __future__ import annotations

import ast
import json
import re
import sys


def own_line(stack: list[dict], name: str) -> int | None:
    for frame in stack:  # innermost first: the first frame of the workload's file
        if frame.get("file", "").endswith(name):
            return frame.get("line")
    return None


def functions_of(workload: str) -> dict[int, int]:
    """Each line of the workload -> the first line of the innermost function
    holding it (its `def`), as torch.profiler names the frame."""
    holder: dict[int, int] = {}
    for node in ast.walk(ast.parse(open(workload).read())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                if line not in holder or holder[line] < node.lineno:
                    holder[line] = node.lineno
    return holder


def shares(ns: dict[str, int]) -> dict[str, float]:
    total = sum(ns.values())
    return {k: v / total for k, v in ns.items()} if total else {}


def main() -> int:
    trace, workload, oracle_path = sys.argv[1:4]
    name = workload.rsplit("/", 1)[-1]
    holder = functions_of(workload)
    marks = {str(holder.get(i, i)): m.group(1) for i, line in enumerate(open(workload), 1)
             if (m := re.search(r"# LINE:(\w+)", line))}
    total = none = 0
    backward: dict[str, int] = {}
    missing: dict[str, int] = {}
    for raw in open(trace):
        row = json.loads(raw)
        gpu = row.get("gpu")
        if gpu is None or gpu.get("kind") != "kernel":
            continue
        ns = gpu["duration_ns"]
        total += ns
        if "autograd_node" in row:
            line = own_line(row.get("py_stack_forward") or [], name)
            key = str(holder.get(line, line)) if line is not None else "none"
            backward[key] = backward.get(key, 0) + ns
            if "py_stack_forward_missing" in row:
                why = row["py_stack_forward_missing"]
                missing[why] = missing.get(why, 0) + ns
        elif not row.get("py_stack"):
            none += ns
    oracle = json.load(open(oracle_path))
    ours, theirs = shares(backward), shares(oracle["backward_ns_by_line"])
    same = sum(min(ours.get(k, 0), theirs.get(k, 0)) for k in set(ours) | set(theirs))
    print(f"kernels' GPU time {total / 1e6:.2f} ms; no Python line {100 * none / total:.3f}%; "
          f"backward {100 * sum(backward.values()) / total:.1f}% of it")
    print(f"{'def':>6} {'marker':>9} {'cudaprobe':>10} {'profiler':>9}")
    for k in sorted(set(ours) | set(theirs), key=lambda k: -theirs.get(k, 0)):
        print(f"{k:>6} {marks.get(k, '-'):>9} {100 * ours.get(k, 0):9.2f}% "
              f"{100 * theirs.get(k, 0):8.2f}%")
    print(f"backward GPU time on the same forward line as torch.profiler's link: "
          f"{100 * same:.2f}%")
    for why, ns in missing.items():
        print(f"  no forward line ({why}): {100 * ns / sum(backward.values()):.2f}% of backward")
    ok = total > 0 and none / total < 0.01 and same >= 0.99
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
