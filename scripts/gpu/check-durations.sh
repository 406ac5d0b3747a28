#!/usr/bin/env bash
# How long `-d N` takes on a running PyTorch job: benchmarks/pystacks_torch.py
# started alone, then `trace --pid P -d 8` and `trace --pid P -d 5 --gpu-time`
# (JSONL), each line cudaprobe says stamped with the ms since it started, and
# the whole wall time. Summary: $OUT/durations.txt. Run from the repo root,
# .gpukit carried:  bash scripts/gpu/check-durations.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
txt=$OUT/durations.txt; : > "$txt"
{ date -u; nvidia-smi -L; } >> "$txt" 2>&1
W=benchmarks/pystacks_torch.py
$TORCH_PY $W --steps 1000000 > /tmp/d-workload.out 2>&1 &
P=$!
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
until grep -q "^step 100 " /tmp/d-workload.out; do sleep 0.5; done
stamped() {  # stamped NAME ARGS...: cudaprobe's lines with the ms since its start
  local name=$1 s; shift
  echo "== $name" | tee -a "$txt"
  s=$(date +%s%N)
  timeout -k 10 120 python3 -m cudaprobe "$@" 2>&1 >/dev/null | grep --line-buffered -v "━\|┃\|│" \
    | while IFS= read -r line; do echo "$(( ($(date +%s%N) - s) / 1000000 )) ms: ${line:0:160}"; done >> "$txt"
  echo "wall $(( ($(date +%s%N) - s) / 1000000 )) ms" >> "$txt"
}
stamped "trace --pid P -d 8" trace --pid $P -d 8 -o /tmp/d8.jsonl --force
stamped "trace --pid P -d 5 --gpu-time" trace --pid $P -d 5 --gpu-time -o /tmp/d5g.jsonl --force
stamped "stats --pid P --gpu-time -d 1.5" stats --pid $P --gpu-time -d 1.5 --json -o /tmp/ds.json --force
kill $P; wait $P 2>/dev/null
cat "$txt"
