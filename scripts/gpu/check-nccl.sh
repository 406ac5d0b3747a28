#!/usr/bin/env bash
# NCCL on two GPUs: scripts/gpu/nccl_waits.py (a torch.distributed job whose
# rank 1 comes LATE_MS late to each of ITERS iterations of all-reduces of 4 KiB,
# 4 MiB and 64 MiB, a broadcast and an all-gather; then all-to-all,
# reduce-scatter, a pipeline's send/recv and a coalesced group, and 64 MiB
# all-reduces, each timed by CUDA events) run by torchrun on 2 ranks three
# times, then checked by scripts/gpu/nccl_compare.py:
#  launched  cudaprobe stats --by collective --gpu-time -- torchrun ...: calls
#            per operation, size and rank; each rank's wait against the lateness
#            put in (10%), the straggler; busbw at 64 MiB against the job's
#            CUDA events (5%), the other timed operations' (10%)
#  trace     cudaprobe trace --api nccl --gpu-time -- torchrun ...: each timed
#            64 MiB all-reduce's kernel time beside its events (5%)
#  attached  the job alone; cudaprobe stats --by collective --gpu-time --pid
#            RANK0 --pid RANK1 attached while it runs its hold loop (all-reduces
#            every 50 ms), the job let go once both ranks record GPU time: the
#            calls from then on, waits and busbw as launched
# NVLink multicast stays off (the device tool's KINDS.md says why).
# Results under $OUT: nccl.txt (the tables and every check), nccl-compare.json,
# nccl-files.tar.gz (the rest: stats JSON, the job's reports, stderr).
# Run from the repo root, .gpukit carried: bash scripts/gpu/check-nccl.sh
# (ITERS, LATE_MS, REPS, TIMED change the job).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TORCHRUN=(/opt/torch/.venv/bin/torchrun --nproc_per_node 2 --master_port 29511)
JOB=(scripts/gpu/nccl_waits.py --iters "${ITERS:-30}" --late-rank 1 --late-ms "${LATE_MS:-30}"
     --reps "${REPS:-10}" --timed "${TIMED:-20}")
txt=$OUT/nccl.txt; : > "$txt"
say() { echo "$*" >> "$txt"; }
step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  echo "step $name" >&2
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
mkdir -p "$OUT"/launched "$OUT"/trace "$OUT"/attached

step launched 240 python3 -m cudaprobe stats --by collective --gpu-time \
  -o "$OUT/launched/stats.json" -- "${TORCHRUN[@]}" "${JOB[@]}" --out "$OUT/launched" \
  > "$OUT/launched/stats.txt" 2> "$OUT/launched/stderr.txt"
sed -n '/^NCCL per operation/,$p' "$OUT/launched/stats.txt" >> "$txt"

step trace 240 python3 -m cudaprobe trace --api nccl --gpu-time -o "$OUT/trace/trace.jsonl" \
  -- "${TORCHRUN[@]}" "${JOB[@]}" --out "$OUT/trace" > /dev/null 2> "$OUT/trace/stderr.txt"

# attached: both ranks by --pid, while the job holds; let go once both record GPU time
echo "step attached" >&2
d=$OUT/attached start=$SECONDS
"${TORCHRUN[@]}" "${JOB[@]}" --hold --out "$d" > "$d/job.txt" 2>&1 &
job=$!
while [ ! -s "$d/ready.0" ] || [ ! -s "$d/ready.1" ]; do
  [ $((SECONDS - start)) -lt 120 ] && kill -0 "$job" 2>/dev/null || break
  sleep 0.2
done
if [ -s "$d/ready.0" ] && [ -s "$d/ready.1" ]; then
  p0=$(cat "$d/ready.0") p1=$(cat "$d/ready.1")
  timeout -k 10 300 python3 -m cudaprobe stats --by collective --gpu-time --pid "$p0" \
    --pid "$p1" -o "$d/stats.json" > "$d/stats.txt" 2> "$d/stderr.txt" &
  tracer=$!
  recording() { grep -c "GPU-time library is recording in pid" "$d/stderr.txt" 2>/dev/null; }
  while [ "$(recording)" != 2 ] && kill -0 "$tracer" 2>/dev/null \
      && [ $((SECONDS - start)) -lt 240 ]; do sleep 0.2; done
  say "step attached: ranks $p0 $p1, $(recording) recording GPU time after $((SECONDS - start)) s"
  touch "$d/go"
  wait "$tracer"; say "step attached: cudaprobe exit $? in $((SECONDS - start)) s"
else
  touch "$d/go"
  say "step attached: the ranks never became ready"
fi
timeout 60 tail --pid="$job" -f /dev/null || kill "$job"
wait "$job"; say "step attached: job exit $?"
sed -n '/^Waits on the GPU/,$p' "$d/stats.txt" >> "$txt"

python3 scripts/gpu/nccl_compare.py "$OUT" >> "$txt" 2>&1
say "compare exit $?"
pack_out nccl-files.tar.gz nccl.txt nccl-compare.json
