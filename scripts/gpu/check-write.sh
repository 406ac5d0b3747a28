#!/usr/bin/env bash
# Writing a trace on the GPU machine: PyTorch (a launch-bound elementwise
# loop, and the MLP) traced to JSONL, CSV and Chrome; how long the writing
# took after the workload exited (the drain), rows a second; and the JSONL's
# launches against the CUPTI callback counter run in the same process
# (benchmarks/oracle/compare.py: counts per function, every launch named).
# Summary: $OUT/write.txt. Run from the repo root, .gpukit carried:
#   bash scripts/gpu/check-write.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build_oracle || exit 1
W="$TORCH_PY benchmarks/torch_workloads.py"
txt=$OUT/write.txt; : > "$txt"
{ date -u; nvidia-smi -L; git log --oneline -1 2>/dev/null; } >> "$txt" 2>&1
for wl in loop mlp; do
  for fmt in jsonl csv chrome.json; do
    d=/tmp/write-$wl-$fmt; rm -rf "$d"; mkdir -p "$d"
    start=$(date +%s.%N)
    CUDA_INJECTION64_PATH=$ORACLE CUPTI_COUNTER_OUT=$d/counts.txt timeout -k 10 300 \
      python3 -m cudaprobe trace -e cudaLaunchKernel,cudaMemcpyAsync,cudaMalloc -o "$d/out.$fmt" \
      -- sh -c "$W $wl --seconds 4 --warmup 3 > $d/workload.out; date +%s.%N > $d/exited" \
      2> "$d/err"
    rc=$?
    end=$(date +%s.%N)
    rows=$(grep -o '[0-9]* calls in' "$d/err" | tail -1 | cut -d' ' -f1)
    python3 - "$wl" "$fmt" "$start" "$(cat "$d/exited")" "$end" "$rows" "$rc" >> "$txt" <<'PY'
import sys
wl, fmt, start, exited, end, rows, rc = sys.argv[1:]
start, exited, end, rows = float(start), float(exited), float(end), int(rows or 0)
drain = end - exited
print(f"{wl:5} {fmt:12} exit {rc}: {rows:,} calls; whole run {end - start:.2f} s, written "
      f"{drain:.2f} s after the workload exited ({rows / drain:,.0f} rows/s end to end)")
PY
    if [ "$fmt" = jsonl ]; then
      python3 benchmarks/oracle/compare.py "$d/counts.txt" "$d/out.jsonl" > "$d/cmp.txt" 2>&1
      grep -E "cudaLaunchKernel|cudaMemcpyAsync|cudaMalloc |named_pct" "$d/cmp.txt" >> "$txt"
    fi
    tail -2 "$d/err" >> "$txt"
    echo "$wl $fmt done"
  done
done
cat "$txt"
