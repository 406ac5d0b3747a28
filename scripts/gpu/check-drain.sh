#!/usr/bin/env bash
# How fast a backlog is written: `trace -e cudaLaunchKernel -o x.jsonl` on the
# whole host (library-wide probes, no command: nothing held at exec) is stopped
# (SIGSTOP: its ring reader, a process of its own, keeps spooling) while PROCS
# (8) copies of benchmarks/named_launches.cu make N (500,000) launches each,
# then continued: the rows of the whole backlog are then written at the
# writing's own speed. Prints the rows and the time from SIGCONT until the
# output holds them all (the time its size last changed, once its rows are all
# there). FORMATS (jsonl): any of jsonl csv chrome. BEFORE=DIR: the tree in DIR
# too, in turn (ROUNDS, 1).
# Summary: $OUT/drain.txt. Run from the repo root, .gpukit carried:
#   bash scripts/gpu/check-drain.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
N=${N:-500000}; PROCS=${PROCS:-8}
txt=$OUT/drain.txt; : > "$txt"
{ date -u; nvidia-smi -L; nproc; } >> "$txt" 2>&1
nvcc -O2 -cudart shared -o build/named_launches_shared benchmarks/named_launches.cu || exit 1
lib=$(ldd build/named_launches_shared | awk '/libcudart/ {print $3}')
echo "libcudart: $lib" >> "$txt"
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
here=$PWD
rows() {  # the rows in $1 ($2: its format), metadata, header and trailer not counted
  [ -f "$1" ] || { echo 0; return; }
  case $2 in
    chrome) grep -c '"ph":"X"' "$1" ;;
    csv) echo $(( $(wc -l < "$1") - 1 )) ;;
    *) grep -vc '"summary"' "$1" ;;
  esac
}
size() { stat -c %s "$1" 2>/dev/null || echo 0; }
for round in $(seq "${ROUNDS:-1}"); do
for fmt in ${FORMATS:-jsonl}; do
for tree in ${BEFORE:+"$BEFORE"} "$here"; do
  d=/tmp/drain; rm -rf $d; mkdir -p $d
  label="$([ "$tree" = "$here" ] && echo this || echo before) $fmt"
  f=$d/out.$fmt; [ "$fmt" = chrome ] && f=$d/out.chrome.json
  (cd "$tree" && PYTHONPATH=$tree:$PYTHONPATH exec python3 -m cudaprobe trace --lib "$lib" -e cudaLaunchKernel \
    --ringbuf-pages 65536 -o $f --force 2> $d/err) &
  tp=$!
  until grep -q "tracing" $d/err 2>/dev/null; do sleep 0.1; done
  sleep 1
  kill -STOP $tp
  progs=()
  for i in $(seq "$PROCS"); do "$here/build/named_launches_shared" "$N" > /dev/null & progs+=($!); done
  wait "${progs[@]}"
  total=$(( N * PROCS ))
  at=$(rows $f $fmt)
  s=$(date +%s%N)
  kill -CONT $tp
  # the time the output last grew; done once it has not grown for 2 s and holds every row
  last=$(size $f); e=$(date +%s%N)
  while kill -0 $tp 2>/dev/null; do
    sleep 0.02
    now=$(date +%s%N); sz=$(size $f)
    if [ "$sz" != "$last" ]; then last=$sz; e=$now
    elif (( now - e > 2000000000 )) && (( $(rows $f $fmt) >= total )); then break
    elif (( now - e > 30000000000 )); then echo "$label: the output stopped short" | tee -a "$txt"; break
    fi
  done
  rows=$(rows $f $fmt)
  kill -INT $tp; wait $tp
  python3 -c "
r, a, t = $rows, $at, ($e - $s) / 1e9
print(f'$label: {r:,} rows ($(grep -o '[0-9]* lost' $d/err | tail -1)), {a:,} written before the stop was lifted; '
      f'the other {r - a:,} written in {t:.2f} s: {(r - a) / t:,.0f} rows a second')" | tee -a "$txt"
done
done
done
