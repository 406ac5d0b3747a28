"""Checks check-nccl.sh's runs of nccl_waits.py against what the job says it did.

Usage: nccl_compare.py OUT   (OUT/launched, OUT/trace, OUT/attached)
  launched  stats --by collective --gpu-time -- torchrun ...: calls per
            operation, size and rank as the job made them; each rank's wait
            within 10% of the lateness the job put in (ITERS x LATE_MS for
            the others, none for the late rank), the late rank the
            straggler, no wait beyond the run; busbw of the 64 MiB
            all-reduces within 5% of the job's CUDA events, the other timed
            operations' within 10%
  trace     trace --api nccl --gpu-time -- torchrun ...: each timed 64 MiB
            all-reduce's NCCL kernel time beside its own CUDA events (5%)
  attached  the job alone, stats --by collective --gpu-time --pid RANK0 --pid
            RANK1 attached while it ran (its hold loop): the calls after the
            hold, exactly, and the waits and busbw as launched
Prints a line per check (PASS/FAIL and the figures), writes OUT/nccl-compare.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from nccl_rows import gpu_ns, rows  # noqa: E402 - beside this script

WAIT_TOLERANCE = 0.10  # of the lateness put in
BUSBW_64M = 0.05
BUSBW_OTHER = 0.10
results: list[dict] = []


def check(name: str, ok: bool, **figures) -> None:
    results.append({"check": name, "ok": bool(ok), **figures})
    print(f"{'PASS' if ok else 'FAIL'} {name}: " + ", ".join(f"{k}={v}" for k, v in
                                                        figures.items()))


def jobs(d: Path) -> dict[int, dict]:
    return {r["rank"]: r for r in (json.loads(p.read_text()) for p in d.glob("rank.*.json"))}


def stats_run(label: str, d: Path, after_hold: bool) -> None:
    report, job = json.loads((d / "stats.json").read_text()), jobs(d)
    check(f"{label} lost", report["lost_total"] == 0, lost=report["lost"])
    check(f"{label} ranks", len(job) >= 2, ranks=sorted(job))
    table = report["nccl"]["collectives"]
    for rank, j in sorted(job.items()):
        mine = [r for r in table if r["rank"] == rank]
        check(f"{label} rank {rank} communicator known", bool(mine) and all(
            r["nranks"] == j["world"] and r["pid"] == j["pid"] for r in mine), rows=len(mine))
        for name, op in j["ops"].items():
            found = [r for r in mine if r["nccl_tests"] == op["nccl_tests"]
                     and r["size"] == op["size"]]
            want = op["main"] + (0 if after_hold else op["warmup"])
            got = sum(r["calls"] for r in found)
            check(f"{label} rank {rank} {name} calls", got == want and not any(
                r["failed"] for r in found), operations=[r["operation"] for r in found],
                calls=got, want=want)
            if "busbw_joined_gbps" not in op:
                continue
            row = max(found, key=lambda r: r["calls"], default=None)
            if row is None or row["busbw_gbps"] is None:
                check(f"{label} rank {rank} {name} busbw", False, why="no GPU time", row=row)
                continue
            ratio = row["busbw_gbps"] / op["busbw_joined_gbps"]
            bound = BUSBW_64M if name == "all_reduce_64m" else BUSBW_OTHER
            check(f"{label} rank {rank} {name} busbw", abs(ratio - 1) <= bound
                  and row["timed_by"] == "gpu", cudaprobe=row["busbw_gbps"],
                  job_joined=round(op["busbw_joined_gbps"], 2),
                  job_own_events=round(op["busbw_own_gbps"], 2), ratio=round(ratio, 4),
                  bound=bound, timed_by=row["timed_by"], timed_calls=row["timed_calls"])
    waits = [w for w in report["nccl"]["waits"] if w["nranks"] == len(job)]
    if not waits:
        check(f"{label} waits", False, why="no communicator of every rank", waits=waits)
        return
    world = max(waits, key=lambda w: w["measured"])
    any_job = next(iter(job.values()))
    put_in_ms = any_job["iters"] * any_job["late_ms"]
    by_rank = {r["rank"]: r for r in world["ranks"]}
    check(f"{label} straggler", world["straggler"] == any_job["late_rank"],
          named=world["straggler"], want=any_job["late_rank"], matched=world["matched"],
          measured=world["measured"])
    for rank, j in sorted(job.items()):
        r = by_rank.get(rank)
        got_ms = None if r is None or r["waited_ns"] is None else r["waited_ns"] / 1e6
        check(f"{label} rank {rank} waited", got_ms is not None and abs(
            got_ms - j["expected_wait_ms"]) <= WAIT_TOLERANCE * put_in_ms,
            cudaprobe_ms=None if got_ms is None else round(got_ms, 2),
            put_in_ms=j["expected_wait_ms"], bound_ms=WAIT_TOLERANCE * put_in_ms,
            last=None if r is None else r["last"])
    longest = max((r["waited_ns"] or 0 for w in report["nccl"]["waits"] for r in w["ranks"]),
                  default=0)
    check(f"{label} no wait beyond the run", longest <= report["duration_s"] * 1e9,
          longest_ms=round(longest / 1e6, 2), run_s=report["duration_s"])


def trace_run(d: Path) -> None:
    calls, summary = rows(d / "trace.jsonl")
    job = jobs(d)
    check("trace lost", summary["lost_total"] == 0, lost=summary.get("lost"))
    gpu = gpu_ns(calls)
    for rank, j in sorted(job.items()):
        op = j["ops"]["all_reduce_64m"]
        mine = [i for i, c in enumerate(calls) if c["pid"] == j["pid"]
                and c["event"] == "ncclAllReduce" and c["args"].get("bytes") == op["size"]]
        timed = mine[-op["timed_calls"]:]
        got = [gpu.get(i) for i in timed]
        events_ns = [ms * 1e6 for ms in op["event_ms_by_rank"][rank]]
        if len(timed) != op["timed_calls"] or None in got:
            check(f"trace rank {rank} 64 MiB all-reduce GPU time", False, calls=len(mine),
                  joined=sum(g is not None for g in got))
            continue
        ratio = sum(got) / sum(events_ns)
        worst = max(abs(g / e - 1) for g, e in zip(got, events_ns))
        check(f"trace rank {rank} 64 MiB all-reduce GPU time", abs(ratio - 1) <= BUSBW_64M,
              cudaprobe_ms=round(sum(got) / 1e6, 3), events_ms=round(sum(events_ns) / 1e6, 3),
              ratio=round(ratio, 4), worst_call=round(worst, 4))


def main() -> int:
    out = Path(sys.argv[1])
    runs = (("launched", lambda: stats_run("launched", out / "launched", False)),
            ("trace", lambda: trace_run(out / "trace")),
            ("attached", lambda: stats_run("attached", out / "attached", True)))
    for name, run in runs:
        try:
            run()
        except Exception as e:  # one run's failure does not lose the others' checks
            check(f"{name} readable", False, error=repr(e))
    (out / "nccl-compare.json").write_text(json.dumps(results, indent=1))
    failed = [r["check"] for r in results if not r["ok"]]
    print(f"{len(results) - len(failed)} of {len(results)} checks passed"
          + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
