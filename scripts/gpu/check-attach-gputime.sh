#!/usr/bin/env bash
# `--pid --gpu-time` on the GPU machine: the GPU-time library injected into a
# PyTorch process running at full speed (benchmarks/attach_workload.py: an
# eager training loop and cuBLAS GEMMs between CUDA events, epoch after epoch),
# 10 cycles of `cudaprobe stats --pid P --gpu-time -d 7` on the same process (about
# 5 s recorded: -d counts from before the injection);
# then the same workload launched under `nsys profile -t cuda` (the
# independent measure of the training kernels); then a workload running
# torch.profiler while cudaprobe attaches (the conflict line, the profiler's
# kernels still recorded). benchmarks/attach_compare.py makes the summary.
# Under 7 minutes. Results under $OUT: attach-gputime.txt (the summary and every
# step's status), attach-gputime.json (the figures), attach-gputime.tar.gz (the rest).
# Run from the repo root, .gpukit carried:
#   bash scripts/gpu/check-attach-gputime.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
CYCLES=${CYCLES:-10}
PARTS=" ${PARTS:-cycles nsys profiler} "  # PARTS=profiler: the conflict check alone
part() { [[ $PARTS == *" $1 "* ]]; }
NSYS=$(find_nsys)
txt=$OUT/attach-gputime.txt; : > "$txt"
say() { echo "$*" | tee -a "$txt"; }
W=("$TORCH_PY" benchmarks/attach_workload.py)
{
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$TORCH_PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "nsys: ${NSYS:-not found}"
} >> "$txt" 2>&1
python3 -m cudaprobe.targets.cupti >> "$txt" 2>&1

# -- 1. the attach cycles on one running process
if part cycles; then
rm -f /tmp/attach.stop
"${W[@]}" --seconds 400 --stop /tmp/attach.stop --log "$OUT/epochs.jsonl" \
  > "$OUT/workload.out" 2> "$OUT/workload.err" &
wpid=$!
for _ in $(seq 600); do  # its CUDA start-up, then a baseline: until 16 epochs are logged
  [ "$(cat "$OUT/epochs.jsonl" 2>/dev/null | wc -l)" -ge 16 ] && break
  kill -0 $wpid 2>/dev/null || break
  sleep 0.2
done
say "workload pid $wpid: $(cat "$OUT/epochs.jsonl" | wc -l) epochs before the first attach"
: > "$OUT/cycles.jsonl"
for i in $(seq "$CYCLES"); do
  t0=$(python3 -c 'import time; print(time.monotonic())')
  timeout -k 5 90 python3 -m cudaprobe stats --pid $wpid --gpu-time --json -d 7 \
    -e cudaLaunchKernel,cuLaunchKernel,cuLaunchKernelEx \
    > "$OUT/cycle$i.json" 2> "$OUT/cycle$i.err"
  rc=$?
  t1=$(python3 -c 'import time; print(time.monotonic())')
  echo "{\"cycle\": $i, \"rc\": $rc, \"t0\": $t0, \"t1\": $t1}" >> "$OUT/cycles.jsonl"
  say "cycle $i: exit $rc in $(python3 -c "print(round($t1 - $t0, 1))") s: $(grep -c 'recording in pid' "$OUT/cycle$i.err") recording line(s); $(grep -v 'recording in pid\|tracing\|attached to' "$OUT/cycle$i.err" | head -3 | tr '\n' ' ')"
  sleep 2.5  # the step time after the detach
done
say "the library's mappings in the workload: $(grep -c 'memfd:cudaprobe-gputime' /proc/$wpid/maps), at offset 0: $(grep 'memfd:cudaprobe-gputime' /proc/$wpid/maps | awk '$3 == "00000000"' | wc -l); threads named cudaprobe-gpu: $(cat /proc/$wpid/task/*/comm | grep -c cudaprobe-gpu)"
touch /tmp/attach.stop
wait $wpid; say "workload exit $?: $(tail -c 300 "$OUT/workload.out")"
fi

# -- 2. the independent measure: the same workload launched under nsys
if ! part nsys; then
  :
elif [ -n "$NSYS" ]; then
  timeout -k 5 150 "$NSYS" profile -t cuda --sample=none --cpuctxsw=none -f true \
    -o "$OUT/ref" "${W[@]}" --seconds 8 --log "$OUT/ref-epochs.jsonl" > "$OUT/nsys.out" 2>&1
  say "nsys profile: exit $?"
  timeout -k 5 120 "$NSYS" stats -r cuda_gpu_kern_sum --format csv -o "$OUT/ref" \
    "$OUT/ref.nsys-rep" > "$OUT/nsys-stats.out" 2>&1
  say "nsys stats: exit $?"
else
  say "nsys: not found, no launched reference"
fi

# -- 3. torch.profiler running in the process while cudaprobe attaches
if part profiler; then
rm -f /tmp/prof.stop  # profiling until the attach is over: CUDA calls all along
"${W[@]}" --seconds 120 --stop /tmp/prof.stop --profile --log "$OUT/prof-epochs.jsonl" \
  > "$OUT/prof.out" 2>&1 &
ppid=$!
for _ in $(seq 600); do
  [ "$(cat "$OUT/prof-epochs.jsonl" 2>/dev/null | wc -l)" -ge 3 ] && break
  kill -0 $ppid 2>/dev/null || break
  sleep 0.2
done
timeout -k 5 90 python3 -m cudaprobe stats --pid $ppid --gpu-time --json -d 3 \
  -e cudaLaunchKernel > "$OUT/prof-stats.json" 2> "$OUT/prof-stats.err"
say "profiler attach: exit $?: $(grep -i 'gpu' "$OUT/prof-stats.err" | tr '\n' ' ')"
touch /tmp/prof.stop
wait $ppid; say "profiler workload exit $?: $(tail -c 300 "$OUT/prof.out")"
fi

# -- the summary
python3 benchmarks/attach_compare.py "$OUT" >> "$txt" 2>&1
say "compare: exit $?"
pack_out attach-gputime.tar.gz attach-gputime.txt attach-gputime.json
