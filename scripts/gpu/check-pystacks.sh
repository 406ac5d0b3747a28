#!/bin/bash
# --py-stacks on the GPU machine: a PyTorch training loop whose calls come from
# known lines (benchmarks/pystacks_torch.py), traced launched and attached
# mid-run; each run's rows checked by benchmarks/pystacks_check.py (the syncs
# of .item(), the forward's GEMMs, the optimizer's calls at their lines; the
# same calls per line each step); `stats --by line --gpu-time`; the step time
# untraced, traced, traced with --py-stacks (3 rounds each, interleaved).
# Results: $OUT/pystacks-*.txt|json
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
T=(benchmarks/pystacks_torch.py)
log=$OUT/pystacks-log.txt
echo "date $(date -u +%FT%TZ); $("$TORCH_PY" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__)')" > "$log"
readlink -f "$TORCH_PY" >> "$log"

echo "== launched" | tee -a "$log"
cudaprobe trace --py-stacks -o /tmp/launched.jsonl --force -- "$TORCH_PY" "${T[@]}" --steps 200 \
  > /tmp/launched.out 2>> "$log"
tail -1 /tmp/launched.out >> "$log"
python3 benchmarks/pystacks_check.py /tmp/launched.jsonl "${T[0]}" > "$OUT/pystacks-launched.json"
grep -m3 '"py_stack"' /tmp/launched.jsonl | cut -c1-1500 > "$OUT/pystacks-rows.txt"
tail -1 /tmp/launched.jsonl >> "$OUT/pystacks-rows.txt"

echo "== attached mid-run" | tee -a "$log"
"$TORCH_PY" "${T[@]}" --steps 100000 > /tmp/attached.out 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q "^step 50 " /tmp/attached.out && break; sleep 0.1; done
cudaprobe trace --py-stacks --pid "$pid" -d 4 -o /tmp/attached.jsonl --force 2>> "$log"
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
python3 benchmarks/pystacks_check.py /tmp/attached.jsonl "${T[0]}" > "$OUT/pystacks-attached.json"

echo "== stats --by line --gpu-time" | tee -a "$log"
COLUMNS=160 cudaprobe stats --by line --gpu-time -- "$TORCH_PY" "${T[@]}" --steps 200 \
  > "$OUT/pystacks-stats-by-line.txt" 2>> "$log"

echo "== cost" | tee -a "$log"
for round in $(seq "${ROUNDS:-2}"); do  # ROUNDS=0: no cost rounds
  echo "round $round untraced $("$TORCH_PY" "${T[@]}" 2>/dev/null | tail -1)" >> "$log"
  echo "round $round trace $(cudaprobe trace -o /tmp/c.jsonl --force -- "$TORCH_PY" "${T[@]}" \
    2>/dev/null | tail -1)" >> "$log"
  echo "round $round trace-py-stacks $(cudaprobe trace --py-stacks -o /tmp/c.jsonl --force -- \
    "$TORCH_PY" "${T[@]}" 2>/dev/null | tail -1)" >> "$log"
done
[ "${ROUNDS:-2}" -gt 0 ] && python3 - "$log" > "$OUT/pystacks-cost.txt" <<'PY'
import json, re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ ([\w-]+) (\{.*\})", line)
    if m:
        runs.setdefault(m[1], []).append(json.loads(m[2])["ms_per_step"])
base = statistics.median(runs["untraced"])
for k, v in runs.items():
    print(f"{k}: ms/step {v}, median {statistics.median(v)}, x{statistics.median(v) / base:.3f}")
PY
cat "$OUT/pystacks-cost.txt" 2>/dev/null
cp "$log" "$OUT/"
