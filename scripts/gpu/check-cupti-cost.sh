#!/usr/bin/env bash
# What CUPTI's recording costs a running PyTorch job by what it records (none,
# the GPU work only, the launches tied by CUPTI's callbacks, every call too), switched on and off in one process by
# the GPU-time library itself (benchmarks/cupti_cost.py). WORKLOADS (mlp
# transformer), ROUNDS (6). Summary: $OUT/cupti-cost.txt. Run from the repo
# root, .gpukit carried.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
txt=$OUT/cupti-cost.txt; : > "$txt"
{ date -u; nvidia-smi -L; git log --oneline -1; } >> "$txt" 2>&1
read -r library cupti < <(python3 -c 'from cudaprobe.targets.cupti import build_library, cupti_library
lib, why = build_library(); print(lib or "-", cupti_library() or "-")')
echo "library $library, libcupti $cupti" | tee -a "$txt"
for w in ${WORKLOADS:-mlp transformer}; do
  timeout 200 "$TORCH_PY" benchmarks/cupti_cost.py "$library" --workload "$w" \
    --rounds "${ROUNDS:-6}" --cupti "${cupti/#-/}" 2>&1 | tee -a "$txt"
done
