#!/usr/bin/env bash
# Does switching CUPTI's recording off and on, or starting and stopping it,
# harm a running PyTorch job? scripts/gpu/cupti_toggle.py in each mode, the
# switches many times faster than serve --duty makes them (a diagnosis of
# the job that died, BENCHMARKS.md). RUNS: "MODE:WORKLOAD:SECONDS:EVERY ..."
# (default below: the transformer step, which died in 2 of 2 `pause` runs
# while the library switched CUPTI's callbacks with the slices, first). Each run's last line and exit status, and where it died
# its native frames (scripts/gpu/abort_bt.c) and Python stacks, go into
# $OUT/toggle.txt. OLD_SOURCE: another gputime.c (an older one, as a
# control), built beside this checkout's other sources; OLD_RUNS are run
# with it after RUNS. Run from the repo root, .gpukit carried.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
txt=$OUT/toggle.txt; : > "$txt"
{ date -u; nvidia-smi -L; git log --oneline -1; } >> "$txt" 2>&1
read -r library cupti < <(python3 -c 'from cudaprobe.targets.cupti import build_library, cupti_library
lib, why = build_library(); print(lib or "-", cupti_library() or "-")')
echo "library $library, libcupti $cupti" | tee -a "$txt"
gcc -shared -fPIC -O2 -o /tmp/abort_bt.so scripts/gpu/abort_bt.c
runs=${RUNS:-pause:transformer:45:0.05 pause:transformer:45:0.05 stop:transformer:45:0.5 work:transformer:30:0.05 pause:mlp:30:0.05 steady:mlp:15:1}
if [ -n "${OLD_SOURCE:-}" ]; then
  old=/tmp/old-gputime; rm -rf "$old"; mkdir -p "$old"; cp cupti/* "$old"/; cp "$OLD_SOURCE" "$old"/gputime.c
  gcc -O2 -shared -fPIC -o "$old"/libgputime-old.so "$old"/gputime.c "$old"/attach.c \
    "$old"/inject_stub.S -I"$old" -I"${CUDA_HOME:-/usr/local/cuda}"/include -ldl -lpthread
  echo "old library $old/libgputime-old.so from $OLD_SOURCE ($(sha256sum < "$OLD_SOURCE" | cut -c1-12))" | tee -a "$txt"
  for run in ${OLD_RUNS:-pause:transformer:45:0.05}; do runs="$runs old:$run"; done
fi
for run in $runs; do
  lib=$library
  case $run in old:*) lib=$old/libgputime-old.so; run=${run#old:} ;; esac
  IFS=: read -r mode workload seconds every <<< "$run"
  echo "== $run $(basename "$lib") $(date -u +%T)" | tee -a "$txt"
  PYTHONFAULTHANDLER=1 LD_PRELOAD=/tmp/abort_bt.so timeout $((seconds + 90)) "$TORCH_PY" \
    scripts/gpu/cupti_toggle.py "$lib" "$mode" --workload "$workload" --seconds "$seconds" \
    --every "$every" --cupti "${cupti/#-/}" > /tmp/toggle.log 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    tail -1 /tmp/toggle.log | tee -a "$txt"
  else
    { echo "exit status $rc"; grep -v "^\s*$" /tmp/toggle.log | tail -60; } | tee -a "$txt"
  fi
done
