#!/usr/bin/env bash
# GPU overhead check (issue 8): a launch-bound loop (empty kernel, 200k
# launches) untraced, under `cudaprobe trace` (JSONL to a file), under
# `cudaprobe stats`, and under Nsight Systems if it is installed; 3 rounds,
# interleaved. Events recorded vs launches made come from the JSONL trailer.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
N=${N:-200000}
nvcc -O2 -cudart=shared -o build/launch_loop benchmarks/launch_loop.cu
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
log="$OUT/overhead.txt"; : > "$log"
for round in 1 2 3; do
  echo "round $round untraced $(build/launch_loop $N)" >> "$log"
  r=$(cudaprobe trace -e kernel -o /tmp/oh.jsonl --force -- build/launch_loop $N 2>/dev/null)
  echo "round $round trace-jsonl $r $(tail -1 /tmp/oh.jsonl | python3 -c 'import json,sys; s=json.load(sys.stdin)["summary"]; print("events", s["calls"], "lost", s["lost_total"])')" >> "$log"
  if cudaprobe stats --help >/dev/null 2>&1; then
    r=$(cudaprobe stats -e kernel -- build/launch_loop $N 2>/dev/null | grep launches)
    echo "round $round stats $r" >> "$log"
  fi
  if [ -n "$NSYS" ]; then
    r=$("$NSYS" profile -t cuda -o /tmp/nsys-$round --force-overwrite true build/launch_loop $N 2>/dev/null | grep launches)
    echo "round $round nsys $r" >> "$log"
  fi
done
echo "nsys: ${NSYS:-not installed}" >> "$log"
cat "$log"
