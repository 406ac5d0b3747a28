"""Checks check-nccl.sh's three runs against what nccl_workload.py says it made.

Usage: nccl_compare.py OUT   (OUT/a, OUT/b, OUT/c as check-nccl.sh leaves them)
Prints a line per check (PASS/FAIL and the figures) and writes OUT/nccl-compare.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TOLERANCE = 0.05
results: list[dict] = []


def check(name: str, ok: bool, **figures) -> None:
    results.append({"check": name, "ok": bool(ok), **figures})
    print(f"{'PASS' if ok else 'FAIL'} {name}: " + ", ".join(f"{k}={v}" for k, v in
                                                        figures.items()))


def jobs(d: Path) -> dict[int, dict]:
    return {r["rank"]: r for r in (json.loads(p.read_text()) for p in d.glob("rank.*.json"))}


def functions(op: dict) -> set[str]:
    return set(op["function"].split("|"))


def rows(path: Path) -> tuple[list[dict], dict]:
    """The trace's NCCL calls, but those made inside another of their thread
    (ncclBcast's ncclBroadcast), in time order; and its summary."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    calls, last = [], {}
    for c in sorted(lines[:-1], key=lambda c: c["ts_ns"]):
        outer = last.get((c["pid"], c["tid"]))
        end = c["ts_ns"] + (c["duration_ns"] or 0)
        if outer is not None and outer[0] <= c["ts_ns"] and end <= outer[1]:
            continue
        last[(c["pid"], c["tid"])] = (c["ts_ns"], end)
        calls.append(c)
    return calls, lines[-1]["summary"]


def stats_run(d: Path) -> None:
    report, job = json.loads((d / "stats.json").read_text()), jobs(d)
    check("A lost", report["lost_total"] == 0, lost=report["lost"])
    table = report["nccl"]["collectives"]
    for rank, j in sorted(job.items()):
        mine = [r for r in table if r["rank"] == rank]
        check(f"A rank {rank} nranks", all(r["nranks"] == j["world"] for r in mine),
              rows=len(mine))
        for name, op in j["ops"].items():
            found = [r for r in mine if r["event"] in functions(op)]
            calls = op["warmup_calls"] + op["timed_calls"]
            got = sum(r["calls"] for r in found)
            nbytes = sum(r["bytes"] for r in found)
            check(f"A rank {rank} {name} calls and bytes",
                  got == calls and nbytes == calls * op["size"]
                  and not any(r["failed"] for r in found),
                  events=[r["event"] for r in found], calls=got, want=calls, bytes=nbytes,
                  want_bytes=calls * op["size"])
            if found and found[0]["busbw_gbps"]:
                ratio = found[0]["busbw_gbps"] / op["busbw_gbps"]
                check(f"A rank {rank} {name} busbw", abs(ratio - 1) <= 0.10,
                      cudaprobe=found[0]["busbw_gbps"], job=round(op["busbw_gbps"], 3),
                      ratio=round(ratio, 4), gpu_calls=found[0]["gpu_calls"])
            else:
                check(f"A rank {rank} {name} busbw", False, why="no GPU time joined")
        slow = [r for r in mine if r["event"] == "ncclReduce"]
        check(f"A rank {rank} slow reduces", sum(r["calls"] for r in slow) == j["slow"],
              calls=sum(r["calls"] for r in slow))
    waits = report["nccl"]["stragglers"]
    slow_rank = next(iter(job.values()))["slow_rank"]
    named = [w["straggler"] for w in waits]
    check("A straggler named", bool(waits) and waits[0]["straggler"] == slow_rank,
          named=named, want=slow_rank,
          waits=[{r["rank"]: (r["last"], r["caused_ns"]) for r in w["ranks"]} for w in waits])


def gpu_ns(calls: list[dict]) -> dict[int, int]:
    """index in `calls` -> GPU ns: its own, or its group's where it is a group's one call."""
    out, depth, members = {}, {}, {}
    for i, c in enumerate(calls):
        key = (c["pid"], c["tid"])
        if c["event"] == "ncclGroupStart":
            depth[key] = depth.get(key, 0) + 1
        elif c["event"] == "ncclGroupEnd" and depth.get(key):
            depth[key] -= 1
            group = members.pop(key, []) if depth[key] == 0 else []
            if c.get("gpu") and len(group) == 1:
                out[group[0]] = c["gpu"]["duration_ns"]
        elif c["category"] in ("collective", "p2p"):
            if c.get("gpu"):
                out[i] = c["gpu"]["duration_ns"]
            if depth.get(key):
                members.setdefault(key, []).append(i)
    return out


def trace_run(d: Path) -> None:
    calls, summary = rows(d / "trace.jsonl")
    job = jobs(d)
    check("B lost", summary["lost_total"] == 0, lost=summary.get("lost"))
    gpu = gpu_ns(calls)
    for rank, j in sorted(job.items()):
        for name, op in j["ops"].items():
            mine = [i for i, c in enumerate(calls) if c["pid"] == j["pid"]
                    and c["event"] in functions(op)]
            timed = mine[-op["timed_calls"]:]
            got = [gpu.get(i) for i in timed]
            events_ns = [ms * 1e6 for ms in op["event_ms"]]
            if len(mine) != op["warmup_calls"] + op["timed_calls"] or None in got:
                check(f"B rank {rank} {name} GPU time", False, calls=len(mine),
                      joined=sum(g is not None for g in got))
                continue
            ratio = sum(got) / sum(events_ns)
            worst = max(abs(g / e - 1) for g, e in zip(got, events_ns))
            check(f"B rank {rank} {name} GPU time", abs(ratio - 1) <= TOLERANCE,
                  cudaprobe_ms=round(sum(got) / 1e6, 3), events_ms=round(sum(events_ns) / 1e6, 3),
                  ratio=round(ratio, 4), worst_call=round(worst, 4))


def pid_run(d: Path) -> None:
    calls, summary = rows(d / "trace.jsonl")
    job = jobs(d)
    j = job.get(1)
    check("C lost", summary["lost_total"] == 0, lost=summary.get("lost"))
    if j is None:
        check("C job", False, why="rank 1 wrote no report")
        return
    pids = {c["pid"] for c in calls}
    check("C only rank 1", pids == {j["pid"]}, pids=sorted(pids))
    for name, op in j["ops"].items():
        got = sum(c["event"] in functions(op) for c in calls)
        check(f"C {name} calls", got == op["timed_calls"], calls=got, want=op["timed_calls"])
    slow = sum(c["event"] == "ncclReduce" for c in calls)
    check("C slow reduces", slow == j["slow"], calls=slow)
    ranks = {(c["args"].get("rank"), c["args"].get("nranks")) for c in calls
             if c["category"] in ("collective", "p2p")}
    check("C communicator read from memory", ranks == {(1, j["world"])}, seen=sorted(
        ranks, key=str))


def main() -> int:
    out = Path(sys.argv[1])
    for name, run in (("a", stats_run), ("b", trace_run), ("c", pid_run)):
        try:
            run(out / name)
        except Exception as e:  # one run's failure does not lose the others' checks
            check(f"{name.upper()} readable", False, error=repr(e))
    (out / "nccl-compare.json").write_text(json.dumps(results, indent=1))
    failed = [r["check"] for r in results if not r["ok"]]
    print(f"{len(results) - len(failed)} of {len(results)} checks passed"
          + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
