#!/usr/bin/env bash
# Where the end of `trace --pid P -d 1.5` goes when P is a DataLoader loop forking
# 4 workers an epoch (scripts/gpu/fork_loader.py): cudaprobe's stderr stamped as said
# (seconds from its start), and from the end of its duration on, every second: each
# Python thread's stack (faulthandler, SIGUSR2), each thread's kernel stack and wchan,
# and cudaprobe's processes. BEFORE=DIR: the tree in DIR too, in turn, each run's
# wall time (ROUNDS). Summary: $OUT/forkloader-stacks.txt.
# Run from the repo root, .gpukit carried: bash scripts/gpu/stacks-forkloader-end.sh
source scripts/gpu/common.sh
o=$OUT/forkloader-stacks.txt; : > "$o"
d=/tmp/fl-stk; rm -rf "$d"; mkdir -p "$d"
python3 -m cudaprobe trace --force -o "$d/warm.jsonl" -- /bin/true > /dev/null 2>&1
$TORCH_PY scripts/gpu/fork_loader.py --epochs 400 --workers 4 > "$d/loop.out" 2> "$d/loop.err" &
fl=$!
until grep -q '"epoch": 1' "$d/loop.out" 2>/dev/null; do sleep 0.1; done
here=$PWD; r=0
for round in $(seq "${ROUNDS:-1}"); do
for tree in ${BEFORE:+"$BEFORE"} "$here"; do
  r=$((r + 1))
  label=$([ "$tree" = "$here" ] && echo this || echo before)
  echo "== run $r ($label): trace --pid $fl -d 1.5" >> "$o"
  : > "$d/err"; : > "$d/py.$r"
  s=$(date +%s%N)
  (cd "$tree" && PYTHONPATH=$tree:$PYTHONPATH exec python3 -c "
import faulthandler, runpy, signal, sys
faulthandler.register(signal.SIGUSR2, file=open('$d/py.$r', 'w'), all_threads=True)
sys.argv = ['cudaprobe', 'trace', '--pid', '$fl', '-d', '1.5', '-o', '$d/c$r.jsonl', '--force']
runpy.run_module('cudaprobe', run_name='__main__')" 2> "$d/err" > /dev/null) &
  cp=$!
  python3 - "$d/err" "$cp" >> "$o" <<'PY' &
import os, sys, time
path, pid = sys.argv[1], int(sys.argv[2])
s = time.time(); seen = 0
while True:
    alive = os.path.exists(f"/proc/{pid}")
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    for line in lines[seen:]:
        if "━" not in line and "┃" not in line and "│" not in line:
            print(f"{time.time() - s:6.3f} {line[:150]}", flush=True)
    seen = len(lines)
    if not alive:
        break
    time.sleep(0.02)
PY
  sp=$!
  until grep -q "duration is over" "$d/err" 2>/dev/null || ! kill -0 $cp 2>/dev/null; do sleep 0.05; done
  k=0
  while kill -0 $cp 2>/dev/null && (( k < 20 )); do
    k=$((k + 1))
    sleep 0.7
    kill -0 $cp 2>/dev/null || break
    {
      echo "-- snapshot $k ($(date +%T.%N | cut -c1-12))"
      kill -USR2 $cp 2>/dev/null
      for t in /proc/$cp/task/*; do
        echo "  task ${t##*/} $(cat $t/comm 2>/dev/null) wchan=$(cat $t/wchan 2>/dev/null) $(head -3 $t/stack 2>/dev/null | awk '{print $2}' | tr '\n' ' ')"
      done
      ps -eo pid,ppid,stat,wchan:24,etimes,comm | awk '$6 ~ /cudaprobe|python3/ && $6 !~ /^python3$/ || $1 == '$cp' || $2 == '$cp''
    } >> "$o" 2>&1
  done
  wait $cp; echo "cudaprobe exit $?, wall $(( ($(date +%s%N) - s) / 1000000 )) ms ($label)" >> "$o"; wait $sp
  sleep 0.3
  echo "-- python stacks (SIGUSR2), run $r" >> "$o"
  grep -v "^$" "$d/py.$r" | grep -v "threading.py\|runpy\|click/core" | head -150 >> "$o"
  sleep 1
done
done
grep "^cudaprobe exit" "$o"
kill $fl; wait $fl 2>/dev/null
echo done >> "$o"
