#!/usr/bin/env bash
# What serve itself costs a node under a busy job: `serve --api driver --lib
# LIBCUDA` (the DaemonSet's) exact and with --duty 2%, each beside the
# launch-bound MLP step for 20 s; serve's CPU (its own and its ring-buffer
# reader's, utime+stime over the run) and memory (resident, and the peak) from
# /proc. Summary: $OUT/serve-cost.txt. Run from the repo root, .gpukit and
# .whl carried:  bash scripts/gpu/check-serve-cost.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
serve_kit
txt=$OUT/serve-cost.txt; : > "$txt"
{ date -u; nvidia-smi -L; nproc; } >> "$txt" 2>&1
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
cpu() {  # cpu PID...: their utime+stime, in seconds
  local t=0 p
  for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat))); done
  python3 -c "print($t / $(getconf CLK_TCK))"
}
mem() { awk '/VmRSS|VmHWM/{printf "%s %d MB  ", $1, $2/1024}' /proc/$1/status; }
for mode in exact duty2; do
  extra=(); [ $mode = duty2 ] && extra=(--duty 2%)
  python3 -m cudaprobe serve --prometheus 127.0.0.1:9464 --api driver --lib "$LIBCUDA" \
    "${extra[@]}" 2> /tmp/cost-serve.err &
  S=$!
  until grep -q "serving Prometheus" /tmp/cost-serve.err; do sleep 0.2; done
  sleep 2
  R=$(pgrep -P $S -f cudaprobe | head -1)  # the ring-buffer reader, forked
  idle0=$(cpu $S $R); sleep 10; idle1=$(cpu $S $R)
  echo "$mode idle 10 s: $(python3 -c "print(f'{($idle1 - $idle0) / 10 * 100:.2f}')")% of a core; serve $(mem $S); reader $(mem $R)" | tee -a "$txt"
  c0=$(cpu $S $R); t0=$(date +%s.%N)
  out=$($TORCH_PY benchmarks/torch_workloads.py mlp --seconds 20 --warmup 3 | tail -1)
  c1=$(cpu $S $R); t1=$(date +%s.%N)
  echo "$mode busy (MLP, $out): $(python3 -c "print(f'{($c1 - $c0) / ($t1 - $t0) * 100:.1f}')")% of a core over $(python3 -c "print(f'{$t1 - $t0:.1f}')") s; serve $(mem $S); reader $(mem $R)" | tee -a "$txt"
  kill -INT $S; wait $S
  grep -o "[0-9]* calls in.*lost" /tmp/cost-serve.err | tail -1 | tee -a "$txt"
done
cat "$txt"
