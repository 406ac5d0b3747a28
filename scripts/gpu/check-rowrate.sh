#!/usr/bin/env bash
# Rows a second on the GPU host: benchmarks/named_launches.cu (PyTorch-like
# templated kernels, round-robin, as fast as the runtime takes them) run
# N times untraced, then traced into JSONL, CSV and Chrome
# (`trace -e cudaLaunchKernel -o x.FMT`); the rows over the time from the
# program's start to cudaprobe's exit (capture and writing: the writing is
# the slower), and the JSONL's launches against the CUPTI callback counter in
# the same process. Then benchmarks/name_scan.py over every object a PyTorch
# process maps once CUDA is up (finding CUDA in a process, now and before).
# Summary: $OUT/rowrate.txt. Run from the repo root, .gpukit carried:
#   bash scripts/gpu/check-rowrate.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build_oracle || exit 1
N=${N:-1000000}
txt=$OUT/rowrate.txt; : > "$txt"
{ date -u; nvidia-smi -L; nproc; } >> "$txt" 2>&1
nvcc -O2 -o build/named_launches benchmarks/named_launches.cu || exit 1
s=$(date +%s%N); build/named_launches "$N" > /dev/null
echo "untraced: $N launches in $(( ($(date +%s%N) - s) / 1000000 )) ms" | tee -a "$txt"
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
for round in 1 2; do
  for fmt in jsonl csv chrome.json; do
    d=/tmp/rate-$fmt; rm -rf "$d"; mkdir -p "$d"
    CUDA_INJECTION64_PATH=$ORACLE CUPTI_COUNTER_OUT=$d/counts.txt timeout -k 10 300 \
      python3 -m cudaprobe trace -e cudaLaunchKernel -o "$d/out.$fmt" --force \
      -- sh -c "date +%s.%N > $d/started; build/named_launches $N > /dev/null; date +%s.%N > $d/exited" \
      2> "$d/err"
    end=$(date +%s.%N)
    rows=$(grep -o '[0-9]* calls in' "$d/err" | tail -1 | cut -d' ' -f1)
    lost=$(grep -o '[0-9]* lost' "$d/err" | tail -1)
    python3 - "$round" "$fmt" "$(cat $d/started)" "$(cat $d/exited)" "$end" "$rows" "$lost" >> "$txt" <<'PY'
import sys
rnd, fmt, started, exited, end, rows, lost = sys.argv[1:]
started, exited, end, rows = float(started), float(exited), float(end), int(rows or 0)
print(f"round {rnd} {fmt:12} {rows:,} rows ({lost}); program ran {exited - started:.2f} s traced, "
      f"cudaprobe ended {end - exited:.2f} s after it: {rows / (end - started):,.0f} rows/s "
      "from the program's start to the last row written")
PY
    if [ "$fmt" = jsonl ] && [ "$round" = 1 ]; then
      python3 benchmarks/oracle/compare.py "$d/counts.txt" "$d/out.jsonl" > "$d/cmp.txt" 2>&1
      grep -E "cudaLaunchKernel|named" "$d/cmp.txt" >> "$txt"
    fi
  done
done
# finding CUDA in a PyTorch process: every object it maps once CUDA is up
$TORCH_PY -c "import torch, time; torch.zeros(1, device='cuda'); print('up', flush=True); time.sleep(60)" > /tmp/up.out &
P=$!
until grep -q up /tmp/up.out; do sleep 0.2; done
mapfile -t OBJS < <(awk '$6 ~ /^\// {print $6}' /proc/$P/maps | sort -u)
kill $P
python3 benchmarks/name_scan.py "${OBJS[@]}" > "$OUT/name-scan-prefixed.jsonl"
python3 - "$OUT/name-scan-prefixed.jsonl" >> "$txt" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in sorted(rows[:-1], key=lambda r: -r["trie_s"])[:6]:
    print(f"  {r['object'].rsplit('/', 1)[-1]:40} {r['mb']:8.1f} MB  prefixed {r['prefixed_s']:.3f} s  trie {r['trie_s']:.3f} s  defines {r['defines']}")
print("  all:", rows[-1])
PY
cat "$txt"
