#!/usr/bin/env bash
# Is a running PyTorch job harmed by serve --duty --gpu-time --py-stacks coming
# and going? scripts/gpu/duty_harm.py: CYCLES (8) starts of serve on the node
# beside one workload, each held HOLD (8) s, SIGKILL every KILL-th (0: never),
# DUTY (10%), PERIOD (1 s), WORK_ONLY (no --py-stacks), NO_GPU_TIME (the
# probes alone). Where the workload dies: its Python stacks, the native
# frames of the thread the signal hit (scripts/gpu/abort_bt.c, preloaded),
# and its core's backtrace of every thread (gdb, where the machine has it)
# goes into $OUT/harm-gdb.txt. QUARANTINE=1: the library built with
# scripts/gpu/quarantine.patch (a diagnosis: each buffer CUPTI hands back held
# a while before it is freed, and checked for CUPTI's writes after the return). Summary: $OUT/harm.txt. Run from the repo root,
# .gpukit and .whl carried.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
serve_kit
txt=$OUT/harm.txt; : > "$txt"
{ date -u; nvidia-smi -L; echo "libcuda $LIBCUDA"; git log --oneline -1; echo "gdb: $(command -v gdb)"; } >> "$txt" 2>&1
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
ulimit -c unlimited
echo '/tmp/core.%p' > /proc/sys/kernel/core_pattern 2>/dev/null
rm -f /tmp/core.* /tmp/gputime-quarantine.txt
gcc -shared -fPIC -O2 -o /tmp/abort_bt.so scripts/gpu/abort_bt.c && export ABORT_BT=/tmp/abort_bt.so
[ -n "${QUARANTINE:-}" ] && patch -s -p1 < scripts/gpu/quarantine.patch && echo "quarantine.patch applied" >> "$txt"
timeout 560 python3 scripts/gpu/duty_harm.py --lib "$LIBCUDA" --out "$txt" \
  --cycles "${CYCLES:-8}" --hold "${HOLD:-8}" --kill "${KILL:-0}" --duty "${DUTY:-10%}" \
  --duty-period "${PERIOD:-1}" ${WORK_ONLY:+--work-only} ${NO_GPU_TIME:+--no-gpu-time}
[ -e /tmp/gputime-quarantine.txt ] && sed 's/^/quarantine: /' /tmp/gputime-quarantine.txt | tee -a "$txt"
core=$(ls /tmp/core.* 2>/dev/null | head -1)
if [ -n "$core" ]; then
  echo "core: $core $(du -h "$core" | cut -f1)" | tee -a "$txt"
  if command -v gdb > /dev/null; then
    timeout 150 gdb -q -batch -ex "info threads" -ex "thread apply all bt 25" \
      "$(readlink -f "$TORCH_PY")" "$core" > "$OUT/harm-gdb.txt" 2>&1
    grep -n -B2 -A25 "abort\|raise" "$OUT/harm-gdb.txt" | head -80 | tee -a "$txt"
  fi
fi
