#!/usr/bin/env bash
# GPU check for `cudaprobe memory` and `cudaprobe stats` on a real GPU: the
# leak program (tests/workloads/leak_two.cu: leaks a 3 MiB device buffer and a
# 256 KiB pinned one, frees a 1 MiB one, and makes a failing cudaFree and
# cudaMalloc) under `memory --stacks`, then a short PyTorch loop under `stats`
# (twice: the second run --compare'd with the first) and under `memory`.
# Run on the device machine from the repo root with .gpukit and .whl carried:
#   bash scripts/gpu/check-stats-memory.sh
# Writes under $OUT (8 files): sm-env.txt; memory-leak.txt (the program's own
# lines, then cudaprobe's report) and memory-leak.json; stats-torch.txt and
# stats-torch.json; stats-compare.txt; memory-torch.txt; sm-summary.txt, which
# checks the leak report against what the program says it leaked.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
{ nvidia-smi -L; uname -r; nvcc --version | tail -1; "$TORCH_PY" -c 'import torch;
print("torch", torch.__version__, "cuda", torch.version.cuda)'; } > "$OUT/sm-env.txt" 2>&1

# frame pointers, so that --stacks can name the callers too
nvcc -cudart=shared -g -O1 -Xcompiler -fno-omit-frame-pointer -o build/leak_two \
  tests/workloads/leak_two.cu
cudaprobe memory --stacks --json -o "$OUT/memory-leak.json" --force -- build/leak_two \
  > "$OUT/memory-leak.txt" 2>&1
echo "exit status: $?" >> "$OUT/memory-leak.txt"

cat > /tmp/loop.py <<'PY'
import torch
torch.manual_seed(0)
x = torch.randn(2048, 2048, device="cuda")
w = torch.randn(2048, 2048, device="cuda")
for i in range(300):
    y = (x @ w).relu_()
    if i % 50 == 0:  # a new size each time: cudaMalloc/cudaFree under the caching allocator
        scratch = torch.empty((i // 50 + 1) << 20, device="cuda")
        del scratch
        torch.cuda.empty_cache()
torch.cuda.synchronize()
print("sum", float(y.sum()))
PY
cudaprobe stats --json -o "$OUT/stats-torch.json" --force -- "$TORCH_PY" /tmp/loop.py \
  > "$OUT/stats-torch.txt" 2>&1
echo "exit status: $?" >> "$OUT/stats-torch.txt"
cudaprobe stats --compare "$OUT/stats-torch.json" -- "$TORCH_PY" /tmp/loop.py \
  > "$OUT/stats-compare.txt" 2>&1
echo "exit status: $? (3: something moved more than 20%)" >> "$OUT/stats-compare.txt"
cudaprobe memory -- "$TORCH_PY" /tmp/loop.py > "$OUT/memory-torch.txt" 2>&1
echo "exit status: $?" >> "$OUT/memory-torch.txt"

python3 - "$OUT" <<'PY' > "$OUT/sm-summary.txt" 2>&1
import json, sys
out = sys.argv[1]
truth = {}
for line in open(f"{out}/memory-leak.txt"):
    if line.startswith('{"site"'):
        t = json.loads(line)
        truth[t["site"]] = t
report = json.load(open(f"{out}/memory-leak.json"))
[p] = [p for p in report["processes"] if p["process"] == "leak_two"]
want = sorted((t["ptr"], t["size"], t["site"]) for t in truth.values() if not t["freed"])
got = sorted((a["ptr"], a["size"], g["site"][0].split("(")[0] if g["site"] else "?")
             for g in p["leaks"] if g["ended_by"] == "process exit" for a in g["allocations"])
print("leak_two leaked (program):", want)
print("leak_two leaked (cudaprobe):", got)
print("LEAKS", "OK" if want == got else "MISMATCH")
keys = ("allocations", "frees", "failed_allocations", "failed_frees", "unknown_frees",
        "nested_driver_calls")
print("counts:", {k: p[k] for k in keys}, "(expected 3, 1, 1, 1, 0, and nested > 0 where "
      "the runtime calls libcuda's exported cuMemAlloc_v2)")
print("COUNTS", "OK" if [p[k] for k in keys[:5]] == [3, 1, 1, 1, 0] else "MISMATCH")
print("implicit frees:", p["implicit_frees"], "peak:", p["peak_bytes"])
for g in p["leaks"]:
    print(f"  {g['bytes']:>9} {g['kind']:<12} {g['event']:<16} {g['ended_by']:<16} "
          + " <- ".join(g["site"][:4]))
print("lost:", report["lost_total"], "libraries:", report["libraries"])
s = json.load(open(f"{out}/stats-torch.json"))
print(f"\nstats, PyTorch loop: {s['calls']} calls in {s['duration_s']}s, lost {s['lost_total']}")
for f in s["functions"][:15]:
    ok = f["min_ns"] <= f["p50_ns"] <= f["p95_ns"] <= f["p99_ns"] <= f["max_ns"]
    ok = ok and sum(b["count"] for b in f["histogram"]) == f["count"]
    print(f"  {f['event']:<28} {f['count']:>7} total {f['total_ns']/1e6:9.3f} ms  p50 "
          f"{f['p50_ns']:>9} p99 {f['p99_ns']:>10} errors {f['errors']} {'' if ok else 'INSANE'}")
PY
cat "$OUT/sm-summary.txt"
