"""The summary of scripts/gpu/check-attach-gputime.sh: from what it left in
OUT, per attach cycle of `stats --pid --gpu-time`: its lines, GPU kernels
and losses; every kernel's average and per-epoch instance count against
Nsight Systems on the same workload launched (the names matched as nsys
and c++filt spell them: casts, `<unnamed>`, spaces and the parameter list
set aside); the step time before the first attach, during each cycle and
after each detach; the workload's output (one distinct line per epoch);
the torch.profiler case. The GEMMs' CUDA event intervals are reported, not
compared: each starts as soon as the GPU is idle after the previous
GEMM's result was read back, so it holds the host's launch of the GEMM too.
Writes OUT/attach-gputime.json, prints lines.
Usage: python attach_compare.py OUT"""

from __future__ import annotations

import csv
import json
import re
import statistics
import sys
from pathlib import Path

MIN_CALLS = 3  # kernels compared: at least this many instances in both
CASTS = re.compile(r"\((?:unsigned )?(?:int|bool|long|char|short)\)")


def normal_name(name: str) -> str:
    """A kernel name as both spellings agree on: no casts, `(anonymous
    namespace)`, no spaces, no integer suffixes, bools as 1/0, lambdas
    unnumbered (c++filt's {lambda()#N}, nsys' [lambda() (instance N)]), no
    parameter list."""
    s = CASTS.sub("", name).replace("<unnamed>", "(anonymousnamespace)").replace(" ", "")
    s = re.sub(r"(\d+)ul\b", r"\1", s)
    s = re.sub(r"\{lambda\(\)#\d+\}|\[lambda\(\)\(instance\d+\)\]", "lambda", s)
    s = re.sub(r"\btrue\b", "1", re.sub(r"\bfalse\b", "0", s))
    if s.endswith(")"):  # cut the last top-level (...): the parameters
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i]
                break
    return s


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] \
        if path.exists() else []


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def main(out: Path) -> dict:
    epochs, cycles = lines(out / "epochs.jsonl"), lines(out / "cycles.jsonl")
    result: dict = {"cycles": []}
    first = cycles[0]["t0"] if cycles else float("inf")
    before = [e for e in epochs[2:] if e["t1"] < first]
    base = median([e["step_ms"] for e in before])
    gemm_ref = [statistics.mean(e["gemm_ms"][j] for e in before) * 1e6
                for j in range(len(before[0]["gemm_ms"]))] if before else []
    result.update(baseline_step_ms=base, gemm_event_ns=gemm_ref, epochs_before=len(before))
    ref = {}
    ref_csv = out / "ref_cuda_gpu_kern_sum.csv"
    ref_epochs = len(lines(out / "ref-epochs.jsonl"))
    if ref_csv.exists():
        for row in csv.DictReader(ref_csv.open()):
            ref[normal_name(row["Name"])] = (int(row["Instances"]), float(row["Avg (ns)"]))
    errors: dict[str, list[float]] = {}
    for k, c in enumerate(cycles):
        nxt = cycles[k + 1]["t0"] if k + 1 < len(cycles) else float("inf")
        during = [e["step_ms"] for e in epochs if e["t0"] >= c["t0"] and e["t1"] <= c["t1"]]
        after = [e["step_ms"] for e in epochs if e["t0"] >= c["t1"] and e["t1"] <= nxt]
        row = {"cycle": c["cycle"], "rc": c["rc"], "during_ms": median(during),
               "after_ms": median(after)}
        try:
            doc = json.loads((out / f"cycle{c['cycle']}.json").read_text())
        except (OSError, ValueError):
            result["cycles"].append(row)
            continue
        kernels = doc.get("gpu", {}).get("kernels", [])
        row.update(lost=doc.get("lost_total"), dropped=doc.get("gpu", {}).get("dropped"),
                   kernels=sum(x["calls"] for x in kernels), names=len(kernels))
        per_epoch, unmatched = [], 0
        for x in kernels:
            key = normal_name(x["name"])
            if key not in ref or not ref_epochs:
                unmatched += 1
                continue
            n_ref, avg_ref = ref[key]
            if x["calls"] >= MIN_CALLS and n_ref >= MIN_CALLS:
                errors.setdefault(key, []).append(x["avg_ns"] / avg_ref - 1)
                per_epoch.append(x["calls"] / (n_ref / ref_epochs))
        row["unmatched_names"] = unmatched
        row["epochs_by_kernel"] = [min(per_epoch), max(per_epoch)] if per_epoch else None
        result["cycles"].append(row)
    errs = {name: statistics.mean(e) for name, e in errors.items()}
    result["kernels_vs_nsys"] = {"compared": len(errs),
                               "within_2pct": sum(abs(e) <= 0.02 for e in errs.values()),
                               "median_abs_error": median([abs(e) for e in errs.values()]),
                               "worst": sorted(errs.items(), key=lambda kv: -abs(kv[1]))[:5],
                               "each": errs}
    result["workload"] = _last_json(out / "workload.out")
    result["profiler"] = {"workload": _last_json(out / "prof.out"), "said": [
        x for x in (out / "prof-stats.err").read_text().splitlines() if "gpu" in x.lower()]
        if (out / "prof-stats.err").exists() else []}
    return result


def _last_json(path: Path) -> dict | None:
    if not path.exists():
        return None
    found = [x for x in path.read_text().splitlines() if x.startswith("{")]
    if not found:
        return None
    doc = json.loads(found[-1])
    doc.pop("outputs", None)
    return doc


def report(r: dict) -> None:
    print(f"baseline step {r['baseline_step_ms']} ms over {r['epochs_before']} epochs; "
          f"GEMM events (ns): {[round(x) for x in r['gemm_event_ns']]}")
    for c in r["cycles"]:
        ratio = f"{(c['after_ms'] / r['baseline_step_ms'] - 1) * 100:+.1f}%" \
            if c.get("after_ms") and r["baseline_step_ms"] else "-"
        print(f"cycle {c['cycle']}: exit {c['rc']}, kernels {c.get('kernels')} "
              f"({c.get('names')} names), lost {c.get('lost')}, dropped {c.get('dropped')}; "
              f"names not in nsys' {c.get('unmatched_names')}; epochs by kernel "
              f"{c.get('epochs_by_kernel')}; step "
              f"during {c.get('during_ms')}, after {c.get('after_ms')} ms "
              f"({ratio} vs before)")
    t = r["kernels_vs_nsys"]
    print(f"kernels vs nsys (average over the cycles): {t['within_2pct']}/{t['compared']} "
          f"within 2%, median |error| {t['median_abs_error']}; worst {t['worst']}")
    print(f"workload: {r['workload']}")
    print(f"profiler: {r['profiler']}")


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    summary = main(out_dir)
    (out_dir / "attach-gputime.json").write_text(json.dumps(summary, indent=1) + "\n")
    report(summary)
