#!/usr/bin/env bash
# Wall time of `trace -e cudaLaunchKernel -o FILE -- named_launches N` into
# each format, the tree in BEFORE (a checkout: `git worktree add DIR REV`) and
# this one in turn, ROUNDS times (3): the side-by-side rounds BENCHMARKS.md
# quotes for writing rows. Builds benchmarks/named_launches.cu with nvcc.
#   BEFORE=/tmp/before bash benchmarks/write_rounds.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-$here/.venv/bin/python}
exe=/tmp/named_launches
[ -x $exe ] || /usr/local/cuda/bin/nvcc -O2 -o $exe "$here/benchmarks/named_launches.cu"
for round in $(seq "${ROUNDS:-3}"); do
  for fmt in ${FORMATS:-jsonl csv chrome.json jsonl.gz}; do
    for tree in ${BEFORE:+"$BEFORE"} "$here"; do
      label=$([ "$tree" = "$here" ] && echo this || echo before)
      start=$(date +%s.%N)
      (cd "$tree" && "$python" -m cudaprobe trace -e cudaLaunchKernel --force \
        -o /tmp/rounds.$fmt -- $exe "${N:-200000}" > /dev/null 2> /tmp/rounds.err)
      end=$(date +%s.%N)
      echo "$round $fmt $label $(python3 -c "print(f'{$end - $start:.2f}')") s," \
           "$(grep -o '[0-9]* lost' /tmp/rounds.err | tail -1)"
    done
  done
done
rm -f /tmp/rounds.*
