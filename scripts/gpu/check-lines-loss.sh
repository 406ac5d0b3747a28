#!/usr/bin/env bash
# Where serve --duty --gpu-time --py-stacks loses about a tenth of the GPU time
# on a node: the node part of check-lines.sh three ways, each line's GPU
# seconds against the workload's own CUDA events. NO_PAUSE: CUPTI left on
# between the slices (the slices still pick the kernels by their launch);
# a 1.0 s tail of CUPTI after each slice instead of 0.2 s (a GPU far behind
# its launches); slices of 1.5 s instead of 0.1 s (a loss at each slice's
# edges shrinks, one in proportion does not). Summary: $OUT/lines-loss.txt.
# Run from the repo root, .gpukit and .whl carried:
#   bash scripts/gpu/check-lines-loss.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sum=$OUT/lines-loss.txt; : > "$sum"
run() {  # run LABEL ENV...: one node part, its ratio line kept
  echo "== $1 $(date -u +%T)" | tee -a "$sum"
  shift
  env "$@" PARTS=node NODE_SECONDS=${NODE_SECONDS:-25} OUT=$OUT bash scripts/gpu/check-lines.sh \
    > /dev/null 2>&1
  grep -h "(ratio\|slices in the window\|^layer\|^adam\|^\[all kernels\]\|unjoined" "$OUT/lines.txt" \
    | cut -c1-160 >> "$sum"
}
run "CUPTI never paused, 10% of 1 s" NO_PAUSE=1 DUTY=10% PERIOD=1
run "the usual, 10% of 1 s (tail 0.2 s)" DUTY=10% PERIOD=1
cp cudaprobe/sessions/duty.py /tmp/duty.py.orig
sed -i 's/^TIES_TAIL_S = 0.2$/TIES_TAIL_S = 1.0/' cudaprobe/sessions/duty.py
run "a 1.0 s tail, 5% of 2 s" DUTY=5% PERIOD=2
cp /tmp/duty.py.orig cudaprobe/sessions/duty.py
run "slices of 1.5 s, 50% of 3 s" DUTY=50% PERIOD=3
cat "$sum"
