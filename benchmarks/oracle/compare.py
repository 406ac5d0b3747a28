"""Compare what `cudaprobe trace` recorded with the CUPTI callback counter.

  python compare.py COUNTS TRACE.jsonl [--window] [--pid PID] [--json OUT]

COUNTS is cupti_counter.c's output: the exit table, or with --window the
"before"/"after" snapshots of COUNTS (their difference is the measured part a
`--pid` trace was attached around). Per function: CUPTI's count, the rows the
trace holds, and the trace summary's calls; then the launches and how many of
them are named (`func_name` present and not a "name unknown" note). Names are
compared by their base (CUPTI reports `cuMemAlloc_v2` as cuMemAlloc_v2, the
runtime's `_ptsz` variants by their plain name): versions and per-thread
suffixes are dropped on both sides. With --pid, only that process's rows are
compared (a tree of processes, each counted by its own CUPTI_COUNTER_OUT=%p
file); the summary's calls are the whole trace's and are not compared then.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter

SUFFIX = re.compile(r"(_v\d+)?(_ptsz|_ptds)?$")
LAUNCHES = re.compile(r"^(cudaLaunch|cuLaunch)")


def base(name: str) -> str:
    return SUFFIX.sub("", name)


def read_counts(path: str, window: bool) -> Counter:
    tables: dict[str, Counter] = {}
    label = None
    for line in open(path):
        if line.startswith("#"):
            label = line.split()[1]
            tables[label] = Counter()
        elif line.strip() and label is not None:
            _domain, name, n = line.split()
            tables[label][base(name)] += int(n)
    if window:
        return tables["after"] - tables["before"]
    return tables["exit"]


def read_trace(path: str, pid: int | None = None) -> tuple[Counter, Counter, dict, int, int]:
    rows: Counter = Counter()
    launches = named = 0
    summary: dict = {}
    for line in open(path):
        d = json.loads(line)
        if "summary" in d:
            summary = d["summary"]
            continue
        if pid is not None and d.get("pid") != pid or d["event"].startswith("nccl"):
            continue  # (NCCL's functions are not CUPTI's to count)
        rows[base(d["event"])] += 1
        if LAUNCHES.match(d["event"]):
            launches += 1
            name = (d.get("args") or {}).get("func_name")
            if name and not name.startswith("name unknown") and not name.startswith("0x"):
                named += 1
    calls: Counter = Counter()
    for event, st in summary.get("by_event", {}).items() if pid is None else ():
        if event.startswith("nccl"):
            continue
        calls[base(event)] += st["calls"] if isinstance(st, dict) else st
    return rows, calls, summary, launches, named


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("counts")
    p.add_argument("trace")
    p.add_argument("--window", action="store_true")
    p.add_argument("--pid", type=int, help="compare this process's rows only")
    p.add_argument("--json")
    a = p.parse_args()
    cupti = read_counts(a.counts, a.window)
    rows, calls, summary, launches, named = read_trace(a.trace, a.pid)
    traced = set(rows) | set(calls)
    print(f"{'function':40} {'cupti':>10} {'rows':>10} {'calls':>10}  match")
    mismatched = 0
    for name in sorted(traced):
        ok = cupti[name] == rows[name] == (calls[name] or rows[name])
        mismatched += not ok
        print(f"{name:40} {cupti[name]:>10} {rows[name]:>10} {calls[name]:>10}  "
              f"{'ok' if ok else 'DIFF'}")
    untraced = {n: c for n, c in cupti.items() if n not in traced}
    result = {"cupti_total": sum(cupti.values()), "rows": sum(rows.values()),
              "summary_calls": summary.get("calls"), "lost": summary.get("lost_total"),
              "traced_functions": len(traced), "mismatched": mismatched,
              "cupti_calls_of_untraced_functions": sum(untraced.values()),
              "launches": launches, "named": named,
              "named_pct": round(100 * named / launches, 2) if launches else None}
    print(json.dumps(result))
    print("not traced (by CUPTI's count):",
          ", ".join(f"{n} {c}" for n, c in sorted(untraced.items(), key=lambda x: -x[1])[:25]))
    if a.json:
        json.dump({**result, "untraced": untraced}, open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
