#!/usr/bin/env bash
# NCCL on two GPUs: scripts/gpu/nccl_workload.py (a torch.distributed job of known
# collectives) run three times by torchrun on 2 ranks, then checked by
# scripts/gpu/nccl_compare.py:
#  A. cudaprobe stats --by collective --gpu-time -- torchrun ...: calls and bytes per
#     collective and rank as the job made them, 0 lost, busbw beside the job's own
#     (CUDA events), the slow rank (a sleep before each of 10 reduces) named;
#  B. cudaprobe trace --api nccl --gpu-time -- torchrun ...: each timed call's NCCL
#     kernel GPU time beside the CUDA events around it (5%);
#  C. the job started alone, cudaprobe trace --pid attached to rank 1 mid-run (after
#     the warm-up, before the timed calls): the calls it made from then on, exactly,
#     its communicator read from memory as rank 1 of 2, 0 lost.
# NVLink multicast stays off (the device tool's KINDS.md says why).
# Results under $OUT: nccl.txt (readable), nccl-compare.json, nccl-files.tar.gz (the rest).
# Run from the repo root, .gpukit carried: bash scripts/gpu/check-nccl.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# pure-Python wheels import from their zip where pip could not unpack them
for w in .whl/*.whl; do [ -e "$w" ] && PYTHONPATH=$PYTHONPATH:$PWD/$w; done
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TORCHRUN=(/opt/torch/.venv/bin/torchrun --nproc_per_node 2 --master_port 29511)
JOB=(scripts/gpu/nccl_workload.py --iters 20 --warmup 2 --slow 10 --slow-rank 1 --slow-ms 30)
txt=$OUT/nccl.txt; : > "$txt"
say() { echo "$*" >> "$txt"; }
step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  timeout -k 10 "$limit" "$@"
  rc=$?
  say "step $name: exit $rc in $((SECONDS - start)) s"
  return $rc
}
{
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$TORCH_PY" -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  git log --oneline -1 2>/dev/null
} >> "$txt" 2>&1
step build-library 120 python3 -m cudaprobe.targets.cupti >> "$txt" 2>&1
mkdir -p "$OUT"/a "$OUT"/b "$OUT"/c

# A: stats --by collective
step A 100 python3 -m cudaprobe stats --by collective --gpu-time -o "$OUT/a/stats.json" \
  -- "${TORCHRUN[@]}" "${JOB[@]}" --out "$OUT/a" > "$OUT/a/stats.txt" 2> "$OUT/a/stderr.txt"
cat "$OUT/a/stats.txt" >> "$txt"

# B: trace --gpu-time
step B 100 python3 -m cudaprobe trace --api nccl --gpu-time -o "$OUT/b/trace.jsonl" \
  -- "${TORCHRUN[@]}" "${JOB[@]}" --out "$OUT/b" > /dev/null 2> "$OUT/b/stderr.txt"

# C: --pid on rank 1, attached while the job waits between warm-up and timed calls
start=$SECONDS
"${TORCHRUN[@]}" "${JOB[@]}" --hold --out "$OUT/c" > "$OUT/c/job.txt" 2>&1 &
job=$!
while [ ! -s "$OUT/c/ready.1" ] && [ $((SECONDS - start)) -lt 60 ]; do sleep 0.2; done
if [ -s "$OUT/c/ready.1" ]; then
  pid=$(cat "$OUT/c/ready.1")
  python3 -m cudaprobe trace --api nccl --pid "$pid" -o "$OUT/c/trace.jsonl" \
    2> "$OUT/c/stderr.txt" &
  tracer=$!
  while ! grep -q "attached to pid $pid" "$OUT/c/stderr.txt" 2>/dev/null \
      && kill -0 "$tracer" 2>/dev/null && [ $((SECONDS - start)) -lt 90 ]; do sleep 0.2; done
  touch "$OUT/c/go"
  timeout 60 tail --pid="$tracer" -f /dev/null || kill -INT "$tracer"
  say "step C: attached to rank 1 (pid $pid) in $((SECONDS - start)) s"
else
  touch "$OUT/c/go"
  say "step C: rank 1 never became ready"
fi
timeout 30 tail --pid="$job" -f /dev/null || kill "$job"
wait "$job"; say "step C: job exit $?"

python3 scripts/gpu/nccl_compare.py "$OUT" >> "$txt" 2>&1
say "compare exit $?"
pack_out nccl-files.tar.gz nccl.txt nccl-compare.json
