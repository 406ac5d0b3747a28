#!/usr/bin/env bash
# GPU check for `cudaprobe trace`: the bundled demo and a PyTorch snippet,
# traced on a real GPU. Run on the device machine from the repo root with
# .gpukit and .whl carried:  bash scripts/gpu/check-trace.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
{ nvidia-smi -L; uname -r; nvcc --version | tail -1; } > "$OUT/trace-env.txt" 2>&1
nvcc -cudart=shared -o build/demo examples/demo.cu
cudaprobe trace -- build/demo > "$OUT/trace-demo.txt" 2>&1
echo "exit status: $?" >> "$OUT/trace-demo.txt"
cudaprobe trace -o "$OUT/trace-demo.jsonl" --force -- build/demo > /dev/null 2>&1
cudaprobe trace -o "$OUT/trace-torch.jsonl" --force -- "$TORCH_PY" scripts/gpu/torch_snippet.py \
  > "$OUT/trace-torch-stderr.txt" 2>&1
python3 - "$OUT" <<'PY' > "$OUT/trace-summary.txt"
import collections, json, sys
for name in ("trace-demo.jsonl", "trace-torch.jsonl"):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{name}")]
    calls, summary = rows[:-1], rows[-1]["summary"]
    print(f"== {name}: {len(calls)} calls, lost {summary['lost_total']}, libs {summary['libraries']}")
    print("   ret names:", dict(collections.Counter(c["ret_name"] for c in calls)))
    print("   events:", dict(collections.Counter(c["event"] for c in calls).most_common(12)))
    for ev in ("cudaMalloc", "cudaMemcpy", "cudaLaunchKernel", "cudaStreamCreate", "cudaEventElapsedTime"):
        for c in [c for c in calls if c["event"] == ev][:2]:
            print(f"   {c['event']:<22} {c['ret_name']:<12} {c['duration_ns']:>9}ns  {c['details'][:150]}")
PY
cat "$OUT/trace-summary.txt"
