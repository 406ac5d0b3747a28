#!/usr/bin/env bash
# What `cudaprobe serve` costs a node with nothing to trace: memory (peak while
# bcc compiles, then resident and proportional set size of serve and its
# ring-buffer reader) and CPU over 60 idle seconds. Run as root from the repo
# root after scripts/setup: serve probes Debian's libcuda (.deps), driver API,
# as the DaemonSet in deploy/kubernetes does.
# Usage: sudo benchmarks/serve_footprint.sh [SECONDS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
idle=${1:-60}
err=$(mktemp)
.venv/bin/python -m cudaprobe serve --prometheus 127.0.0.1:19464 --api driver \
  --lib "$(cat .deps/libcuda.path)" 2>"$err" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid; rm -f "$err"' EXIT
for _ in $(seq 240); do grep -q serving "$err" && break; sleep 0.5; done
grep -q serving "$err" || { cat "$err" >&2; exit 1; }
procs="$pid $(pgrep -P $pid | tr '\n' ' ')"
ticks() { for p in $procs; do awk '{print $14 + $15}' "/proc/$p/stat"; done | paste -sd+ | bc; }
t0=$(ticks); sleep "$idle"; t1=$(ticks)
for p in $procs; do
  printf '%s %s: %s %s\n' "$p" "$(cat "/proc/$p/comm")" \
    "$(grep -E '^(VmHWM|VmRSS)' "/proc/$p/status" | tr -s ' \t\n' ' ')" \
    "$(grep -E '^Pss:' "/proc/$p/smaps_rollup" | tr -s ' \t\n' ' ')"
done
echo "CPU over ${idle} s idle: $(echo "scale=2; ($t1 - $t0) * 100 / $(getconf CLK_TCK) / $idle" | bc)% of one core"
echo "scrape: $(curl -s http://127.0.0.1:19464/metrics | wc -c) bytes"
