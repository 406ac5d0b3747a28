#!/usr/bin/env bash
# Where `trace --pid P -d 1.5` spends its time when P is a DataLoader loop forking
# 4 workers an epoch (scripts/gpu/fork_loader.py): each line of cudaprobe's stderr
# stamped as said (seconds from the start), then the same run under cProfile (the
# main thread: the attach and the detach). Summary: $OUT/forkloader-end.txt.
# Run from the repo root, .gpukit carried: bash scripts/gpu/profile-forkloader-end.sh
source scripts/gpu/common.sh
o=$OUT/forkloader-end.txt
d=/tmp/fl-end; rm -rf "$d"; mkdir -p "$d"
python3 -m cudaprobe trace --force -o "$d/warm.jsonl" -- /bin/true > /dev/null 2>&1
$TORCH_PY scripts/gpu/fork_loader.py --epochs 400 --workers 4 > "$d/loop.out" 2> "$d/loop.err" &
fl=$!
until grep -q '"epoch": 1' "$d/loop.out" 2>/dev/null; do sleep 0.1; done
stamp() { awk -v s="$1" '{ c = "date +%s%N"; c | getline t; close(c)
  printf "%6.3f %s\n", (t - s) / 1e9, substr($0, 1, 160); fflush() }'; }
for r in 1 2; do
  echo "== run $r: trace --pid $fl -d 1.5 -o calls.jsonl, stderr stamped" >> "$o"
  s=$(date +%s%N)
  python3 -m cudaprobe trace --pid $fl -d 1.5 -o "$d/c$r.jsonl" --force 2>&1 >/dev/null \
    | stamp "$s" | grep -v "not held opening\|ran 0\.\|^ *[0-9.]* [━┃│ ]" >> "$o"
  echo "wall $(( ($(date +%s%N) - s) / 1000000 )) ms" >> "$o"
  python3 - "$d/c$r.jsonl" >> "$o" <<'PY'
import json, sys
ts = [json.loads(l).get("ts_ns") for l in open(sys.argv[1]) if '"summary"' not in l]
ts = [t for t in ts if t]
print(f"rows {len(ts)}, their calls over {(max(ts) - min(ts)) / 1e9:.2f} s" if ts else "no rows")
PY
  sleep 1
done
echo "== under cProfile (main thread), cumulative" >> "$o"
s=$(date +%s%N)
python3 -m cProfile -o "$d/prof.out" -m cudaprobe trace --pid $fl -d 1.5 -o "$d/p.jsonl" --force \
  > /dev/null 2> "$d/p.err"
echo "wall $(( ($(date +%s%N) - s) / 1000000 )) ms" >> "$o"
grep "calls in" "$d/p.err" >> "$o"
python3 -c "
import pstats
p = pstats.Stats('$d/prof.out'); p.sort_stats('cumulative').print_stats(40)" 2>&1 \
  | grep -v '^$' | cut -c1-170 | head -70 >> "$o"
kill $fl; wait $fl 2>/dev/null
echo done >> "$o"
