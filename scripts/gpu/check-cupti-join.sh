#!/usr/bin/env bash
# What CUPTI's ways of tying a kernel to its launching call cost a launch-bound
# loop and whether they tie every kernel, CUDA running before CUPTI comes (an
# attach), and each switched off and on 200 times while another thread
# launches (scripts/gpu/cupti_join.cu). Summary: $OUT/cupti-join.txt.
# Run from the repo root:  bash scripts/gpu/check-cupti-join.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/cudaprobe-gpu-out}
mkdir -p "$OUT"
txt=$OUT/cupti-join.txt
lib=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda-*/ -name 'libcupti.so' 2>/dev/null | head -1)")
inc=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda-*/ -name 'cupti.h' 2>/dev/null | head -1)")
{ date -u; nvidia-smi -L; git log --oneline -1; echo "cupti $lib"; } > "$txt" 2>&1
nvcc -O2 -o /tmp/cupti_join scripts/gpu/cupti_join.cu -I"$inc" -L"$lib" -lcupti \
  -Xlinker -rpath -Xlinker "$lib" >> "$txt" 2>&1 || { echo "build failed" | tee -a "$txt"; exit 1; }
for run in 1 2; do
  timeout 240 /tmp/cupti_join "${ROUNDS:-7}" "${LAUNCHES:-100000}" "${SWITCHES:-200}" 2>&1 | tee -a "$txt"
  echo "exit ${PIPESTATUS[0]}" | tee -a "$txt"
done
