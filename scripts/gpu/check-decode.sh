#!/usr/bin/env bash
# Where writing a real job's rows goes: benchmarks/pystacks_torch.py started
# alone, then `trace --pid P -d 6` into JSONL, CSV and Chrome, each under
# py-spy (its folded stacks of cudaprobe's main process: $OUT/FMT.folded, the
# top of them in the summary), with the wall time and the rows by function.
# Summary: $OUT/decode.txt. Run from the repo root, .gpukit carried (with
# py-spy in .gpukit/bin):  bash scripts/gpu/check-decode.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
txt=$OUT/decode.txt; : > "$txt"
{ date -u; nvidia-smi -L; git log --oneline -1 2>/dev/null; } >> "$txt" 2>&1
SPY=/tmp/py-spy; [ -x $SPY ] || gunzip -c .gpukit/bin/py-spy.gz > $SPY; chmod +x $SPY
W=benchmarks/pystacks_torch.py
$TORCH_PY $W --steps 1000000 > /tmp/dd-workload.out 2>&1 &
P=$!
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
until grep -q "^step 100 " /tmp/dd-workload.out; do sleep 0.5; done
for fmt in ${FORMATS:-jsonl csv chrome.json}; do
  echo "== trace --pid P -d ${D:-6} -o x.$fmt" | tee -a "$txt"
  s=$(date +%s%N)
  timeout -k 10 150 $SPY record --nonblocking --rate 250 --format raw -o "$OUT/$fmt.folded" -- \
    python3 -m cudaprobe trace --pid $P -d ${D:-6} -o /tmp/dd.$fmt --force 2> /tmp/dd.err >/dev/null
  echo "wall $(( ($(date +%s%N) - s) / 1000000 )) ms" | tee -a "$txt"
  grep -E "calls in|lost|--duration" /tmp/dd.err | tee -a "$txt"
  python3 scripts/gpu/folded_top.py "$OUT/$fmt.folded" >> "$txt" 2>&1
done
python3 - /tmp/dd.jsonl >> "$txt" 2>&1 <<'PY'
import collections, json, sys
c = collections.Counter()
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "event" in r:
        c[r["event"]] += 1
print("rows by function (jsonl run):", sum(c.values()))
for k, v in c.most_common(25):
    print(f"  {k:40} {v}")
PY
kill $P; wait $P 2>/dev/null
gzip -f "$OUT"/*.folded
cat "$txt"
