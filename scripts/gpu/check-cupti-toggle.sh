#!/usr/bin/env bash
# Does switching CUPTI's recording off and on, or starting and stopping it,
# harm a running PyTorch job? scripts/gpu/cupti_toggle.py in each mode, the
# switches many times faster than serve --duty made them (a diagnosis of the
# job that died, BENCHMARKS.md; serve no longer switches CUPTI). RUNS:
# "[VARIANT@]MODE:WORKLOAD:SECONDS:EVERY ...". MODE stop starts and stops the
# recording, each stop taking CUPTI out of the process (cuptiFinalize at the
# job's next CUDA call's exit, as cudaprobe's stop does); stop-kept leaves it
# in. A VARIANT is this checkout's cupti/gputime.c with the patches of
# scripts/gpu/cupti-variants/ named in it applied, joined by "+"
# (callbacks-switched+per-thread-off), or `old`: the gputime.c at OLD_SOURCE
# (an earlier one, as a control). Default below: the recording started and
# stopped every 50 ms under the transformer step, CUPTI taken out at each stop
# (twice), then left in (the stop as it was before cuptiFinalize: it died 1 of
# 2 at 0.5 s); then the step switched every 20 ms by the variants that might
# make switching safe (the library as it was died in 1 of 3 runs there,
# callbacks-switched in 3 of 3). Each run's last line and exit status, and
# where it died its native frames (scripts/gpu/abort_bt.c) and Python stacks,
# go into $OUT/toggle.txt. Run from the repo root, .gpukit carried.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
txt=$OUT/toggle.txt; : > "$txt"
{ date -u; nvidia-smi -L; git log --oneline -1; } >> "$txt" 2>&1
read -r library cupti < <(python3 -c 'from cudaprobe.targets.cupti import build_library, cupti_library
lib, why = build_library(); print(lib or "-", cupti_library() or "-")')
echo "library $library, libcupti $cupti" | tee -a "$txt"
gcc -shared -fPIC -O2 -o /tmp/abort_bt.so scripts/gpu/abort_bt.c
t=transformer:40:0.02
f=transformer:40:0.05
runs=${RUNS:-stop:$f stop:$f stop-kept:$f callbacks-switched+per-thread-off@pause:$t callbacks-switched+no-flush-period@pause:$t work:$t}

# variant NAME: its library's path (built once), "" where it cannot be built
variant() {
  local dir=/tmp/gputime-variants/$1 patch
  if [ ! -e "$dir/lib.so" ]; then
    rm -rf "$dir"; mkdir -p "$dir"; cp cupti/*.c cupti/*.h cupti/*.S "$dir"/
    if [ "$1" = old ]; then
      cp "${OLD_SOURCE:?OLD_SOURCE: the gputime.c of the variant old}" "$dir"/gputime.c
    else
      for patch in ${1//+/ }; do
        (cd "$dir" && git apply -p2 "$OLDPWD/scripts/gpu/cupti-variants/$patch.patch") || return
      done
    fi
    gcc -O2 -shared -fPIC -o "$dir"/lib.so "$dir"/gputime.c "$dir"/attach.c \
      "$dir"/inject_stub.S -I"$dir" -I"${CUDA_HOME:-/usr/local/cuda}"/include -ldl -lpthread \
      || return
    echo "variant $1: $(sha256sum < "$dir"/gputime.c | cut -c1-12)" >> "$txt"
  fi
  echo "$dir/lib.so"
}

for run in $runs; do
  lib=$library name=$(basename "$library")
  case $run in *@*) name=${run%%@*}; run=${run#*@}; lib=$(variant "$name") ;; esac
  echo "== $run $name $(date -u +%T)" | tee -a "$txt"
  if [ -z "$lib" ]; then
    echo "the variant $name could not be built" | tee -a "$txt"; continue
  fi
  IFS=: read -r mode workload seconds every <<< "$run"
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
