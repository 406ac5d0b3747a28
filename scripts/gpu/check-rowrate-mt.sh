#!/usr/bin/env bash
# Rows a second the decoder writes when the probes make more than one
# program can: PROCS (4) copies of benchmarks/named_launches.cu, N (500,000)
# launches each, at once under one `trace -e cudaLaunchKernel -o x.jsonl`;
# the rows over the time from the first program's start to cudaprobe's exit,
# and how long after the last program cudaprobe ended.
# BEFORE=DIR: each format run by the tree in DIR too, in turn with this one
# (ROUNDS, 1), to compare two trees on one host.
# Summary: $OUT/rowrate-mt.txt. Run from the repo root, .gpukit carried:
#   bash scripts/gpu/check-rowrate-mt.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
N=${N:-500000}; PROCS=${PROCS:-4}
txt=$OUT/rowrate-mt.txt; : > "$txt"
{ date -u; nvidia-smi -L; nproc; } >> "$txt" 2>&1
nvcc -O2 -o build/named_launches benchmarks/named_launches.cu || exit 1
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
here=$PWD
for round in $(seq "${ROUNDS:-1}"); do
for fmt in ${FORMATS:-jsonl}; do
for tree in ${BEFORE:+"$BEFORE"} "$here"; do
  d=/tmp/ratemt; rm -rf $d; mkdir -p $d
  label=$([ "$tree" = "$here" ] && echo this || echo before)
  (cd "$tree" && PYTHONPATH=$tree:$PYTHONPATH python3 -m cudaprobe trace -e cudaLaunchKernel \
    -o $d/out.$fmt --force -- sh -c \
    "date +%s.%N > $d/started; for i in \$(seq $PROCS); do $here/build/named_launches $N > /dev/null & done; wait; date +%s.%N > $d/exited; wc -l < $d/out.$fmt > $d/lines_at_exit" \
    2> $d/err)
  end=$(date +%s.%N)
  rows=$(grep -o '[0-9]* calls in' $d/err | tail -1 | cut -d' ' -f1)
  lost=$(grep -o '[0-9]* lost' $d/err | tail -1)
  python3 -c "
s, e, x, r = float(open('$d/started').read()), float('$end'), float(open('$d/exited').read()), int('${rows:-0}')
w = min(r, int(open('$d/lines_at_exit').read() or 0))  # (Chrome: events a line; buffered rows count as left)
print(f'$label $fmt: {r:,} rows ($lost) from $PROCS programs at once; they ran {x - s:.2f} s traced '
      f'({r / (x - s):,.0f} calls a second made), cudaprobe ended {e - x:.2f} s after them: '
      f'{r / (e - s):,.0f} rows a second written from their start; '
      f'{r - w:,} rows left at their exit written in {e - x:.2f} s: {(r - w) / (e - x):,.0f} a second')" | tee -a "$txt"
  rm -f $d/out.$fmt
done
done
done
cat "$txt"
