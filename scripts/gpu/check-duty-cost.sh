#!/usr/bin/env bash
# serve's cost to a launch-bound PyTorch job inside one run of it (exact, then
# --duty 2%), windows with and without serve alternating: scripts/gpu/duty_cost.py.
# Summary: $OUT/duty-cost.txt. Run from the repo root, .gpukit and .whl carried:
#   bash scripts/gpu/check-duty-cost.sh   (PAIRS, EXACT_PAIRS, WINDOW to change its size)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
serve_kit
txt=$OUT/duty-cost.txt; : > "$txt"
{ date -u; nvidia-smi -L; echo "libcuda $LIBCUDA"; git log --oneline -1; } >> "$txt" 2>&1
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
python3 scripts/gpu/duty_cost.py --lib "$LIBCUDA" --out "$txt" --pairs "${PAIRS:-8}" \
  --exact-pairs "${EXACT_PAIRS:-4}" --window "${WINDOW:-10}"
