#!/usr/bin/env bash
# What a duty-cycled serve costs PyTorch jobs at full speed, each slice against
# the job's own steps just before and after it (scripts/gpu/slice_cost.py): the
# launch-bound MLP step and a transformer training step, each beside
# `serve --api driver --duty 2% --duty-period 5` (the DaemonSet's probes; slices
# six times as often as its 30-s period, so the links go in and out six times
# as often) for SECONDS (120). Summary: $OUT/slice-cost.txt. Run from the repo
# root, .gpukit and .whl carried:  bash scripts/gpu/check-slice-cost.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
serve_kit
txt=$OUT/slice-cost.txt; : > "$txt"
{ date -u; nvidia-smi -L; echo "libcuda $LIBCUDA"; git log --oneline -1; nproc; uptime; } >> "$txt" 2>&1
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
for w in ${WORKLOADS:-mlp transformer}; do
  echo "== $w" | tee -a "$txt"
  python3 scripts/gpu/slice_cost.py --lib "$LIBCUDA" --out "$txt" --workload "$w" \
    --seconds "${SECONDS_RUN:-120}" --duty "${DUTY:-2%}" --duty-period "${PERIOD:-5}"
done
uptime >> "$txt"
