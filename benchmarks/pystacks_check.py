"""Check a `trace --py-stacks` JSONL of benchmarks/pystacks_torch.py: are its
calls attributed to the lines that made them? Prints one JSON summary.

Independent of the stacks themselves, what each line must make is known:
the only syncs and device-to-host copies in the loop are `.item()`'s; the
main thread's GEMM launches are the forward's (the backward's GEMMs are
launched by autograd's device threads, which have no Python frame); the
optimizer's kernels are launched inside torch/optim. And each step makes the
same calls from the same lines: the per-step counts per line must repeat.

Usage: python pystacks_check.py calls.jsonl pystacks_torch.py
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter

SYNCS = re.compile(r"Synchronize")
COPIES = re.compile(r"Memcpy")
GEMM = re.compile(r"gemm|cutlass|xmma|sm\d\d_|Kernel2|ampere|hopper", re.I)
LAUNCH = re.compile(r"Launch")


def markers(script: str) -> dict[str, int]:
    return {m[1]: i for i, line in enumerate(open(script), 1)
            if (m := re.search(r"# LINE:(\w+)", line))}


def main() -> None:
    path, script = sys.argv[1], sys.argv[2]
    lines = markers(script)
    name_of = {v: k for k, v in lines.items()}
    rows = [json.loads(r) for r in open(path) if r.startswith('{"time_ms"')]
    with_stack = [r for r in rows if r.get("py_stack")]
    without = [r for r in rows if not r.get("py_stack")]
    checks: Counter = Counter()
    wrong: list = []
    per_step: list[Counter] = []
    step: Counter = Counter()
    for r in with_stack:
        frames = [f for f in r["py_stack"] if f["file"].endswith(script.rsplit("/", 1)[-1])]
        if not frames:
            continue
        line = name_of.get(frames[0]["line"], f"other:{frames[0]['line']}")
        in_loop = any(name_of.get(f["line"]) in ("loss", "backward", "optimizer", "item")
                      for f in frames if f["function"] == "main")
        if not in_loop:
            checks["setup"] += 1
            continue
        step[line] += 1
        func = r.get("args", {}).get("func_name", "") or ""
        kind = None
        if SYNCS.search(r["event"]) or (COPIES.search(r["event"]) and "DtoH" in json.dumps(
                r.get("args", {})) or "DeviceToHost" in json.dumps(r.get("args", {}))):
            kind, want = "sync_or_dtoh", {"item"}
        elif LAUNCH.search(r["event"]) and GEMM.search(func):
            kind, want = "gemm_launch", {"matmul", "head"}
        elif any("/torch/optim/" in f["file"] for f in r["py_stack"]):
            kind, want = "optimizer_call", {"optimizer"}
        else:
            kind, want = "other_in_loop", set(lines)
        checks[kind] += 1
        if line not in want:
            checks[kind + "_wrong"] += 1
            if len(wrong) < 10:
                wrong.append({"event": r["event"], "func": func[:80], "line": line,
                              "want": sorted(want)})
        if line == "item" and SYNCS.search(r["event"]):
            per_step.append(step)
            step = Counter()
    patterns = Counter(json.dumps(sorted(s.items())) for s in per_step[1:])
    mode, mode_n = patterns.most_common(1)[0] if patterns else ("{}", 0)
    judged = sum(v for k, v in checks.items() if k != "setup" and not k.endswith("_wrong"))
    bad = sum(v for k, v in checks.items() if k.endswith("_wrong"))
    print(json.dumps({
        "rows": len(rows), "rows_with_py_stack": len(with_stack),
        "rows_without_py_stack": len(without),
        "without_by_tid_is_main": Counter(str(r["tid"] == r["pid"]) for r in without),
        "launches_without_py_stack": sum(1 for r in without if LAUNCH.search(r["event"])),
        "checks": checks, "right_fraction": round(1 - bad / judged, 5) if judged else None,
        "steps_seen": len(per_step), "steps_with_the_usual_calls_per_line": mode_n,
        "usual_calls_per_line": json.loads(mode), "wrong_examples": wrong,
        "line_numbers": lines}, indent=1))


if __name__ == "__main__":
    main()
