#!/usr/bin/env bash
# GPU overhead check, 3 rounds, configurations interleaved per round:
#  1. launch-bound loop (benchmarks/launch_loop.cu: empty kernel, $N launches):
#     untraced, `cudaprobe trace -e kernel -o x.jsonl`, `cudaprobe stats -e
#     kernel`, and Nsight Systems (`nsys profile -t cuda`) if found. Events vs
#     launches from the JSONL trailer.
#     Also the floor: bpftrace count-only uprobe + uretprobe on the same
#     functions, and the runtime layer alone (--api runtime).
#  2. PyTorch training loops (benchmarks/torch_train.py under $TORCH_PY), a
#     launch-bound one and a GPU-bound one: untraced, `cudaprobe trace -o
#     x.jsonl` (every function; and --api runtime), `cudaprobe stats`, and nsys
#     if found: ms/step. The traced cudaLaunchKernel count is
#     checked against CUPTI's count of one step (--count-launches, untraced run).
# Results: $OUT/overhead.txt (one line per run) and $OUT/overhead-summary.txt.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
N=${N:-200000}
STEPS=${STEPS:-300}
WARMUP=${WARMUP:-30}
nvcc -O2 -cudart=shared -o build/launch_loop benchmarks/launch_loop.cu

NSYS=$(find_nsys)

log="$OUT/overhead.txt"; : > "$log"
trailer() {  # events and losses from a JSONL trailer; $2: also this event's count
  tail -1 "$1" | python3 -c '
import json, sys
s = json.load(sys.stdin)["summary"]
name = sys.argv[1] if len(sys.argv) > 1 else ""
n = sum(v["calls"] for k, v in s["by_event"].items() if name and k.startswith(name))
print("events", s["calls"], "lost", s["lost_total"], *(["events_" + name, n] if name else []))
' ${2:-}
}
json_line() { grep -m1 '^{' ; }

# the floor: what the uprobe + uretprobe traps alone cost, with a count-only bpftrace
# program on the same functions (two layers: cudaLaunchKernel and the cuLaunchKernel
# it calls; one layer: cudaLaunchKernel only)
CUDART=$(ldd build/launch_loop | awk '/libcudart/{print $3}')
LIBCUDA=${LIBCUDA:-/usr/local/nvidia/lib64/libcuda.so.1}
[ -e "$LIBCUDA" ] || LIBCUDA=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
floor_prog() {  # $@: probe specs
  local entry="" ret="" p
  for p in "$@"; do entry+="${entry:+,}uprobe:$p"; ret+="${ret:+,}uretprobe:$p"; done
  echo "$entry { @entries = count(); } $ret { @returns = count(); }"
}
FLOOR2=$(floor_prog "$CUDART:cudaLaunchKernel" "$LIBCUDA:cuLaunchKernel")
FLOOR1=$(floor_prog "$CUDART:cudaLaunchKernel")
launch() { build/launch_loop "$N" | grep -m1 launches; }
for round in 1 2 3; do
  echo "round $round launch untraced $(launch)" >> "$log"
  r=$(bpftrace -e "$FLOOR2" -c "build/launch_loop $N" 2>/dev/null | grep -m1 launches)
  echo "round $round launch floor-2layers $r" >> "$log"
  r=$(bpftrace -e "$FLOOR1" -c "build/launch_loop $N" 2>/dev/null | grep -m1 launches)
  echo "round $round launch floor-runtime $r" >> "$log"
  r=$(cudaprobe trace -e kernel -o /tmp/oh.jsonl --force -- build/launch_loop "$N" 2>/dev/null)
  echo "round $round launch trace-jsonl $r $(trailer /tmp/oh.jsonl)" >> "$log"
  r=$(cudaprobe trace --api runtime -e cudaLaunchKernel -o /tmp/oh1.jsonl --force \
      -- build/launch_loop "$N" 2>/dev/null)
  echo "round $round launch trace-runtime $r $(trailer /tmp/oh1.jsonl)" >> "$log"
  r=$(cudaprobe stats -e kernel -- build/launch_loop "$N" 2>/dev/null | grep launches)
  echo "round $round launch stats $r" >> "$log"
  r=$(cudaprobe stats --api runtime -e cudaLaunchKernel -- build/launch_loop "$N" 2>/dev/null \
      | grep launches)
  echo "round $round launch stats-runtime $r" >> "$log"
  if [ -n "$NSYS" ]; then
    r=$("$NSYS" profile -t cuda -o "/tmp/nsys-launch-$round" --force-overwrite true \
        build/launch_loop "$N" 2>/dev/null | grep launches)
    echo "round $round launch nsys $r" >> "$log"
  fi
done

# two PyTorch loops: "torch", a small MLP whose steps are bound by kernel launches
# (the worst case for a per-call tracer), and "torchbig", a GPU-bound one (width
# 2048, batch 4096: ~15 ms of GPU work per step, launches hidden behind it)
torch_loop() {  # $1: workload name, then torch_train.py's arguments
  local work=$1 round r; shift
  local T=(benchmarks/torch_train.py "$@")
  echo "$work count $("$TORCH_PY" "${T[@]}" --count-launches 2>/dev/null | json_line)" >> "$log"
  for round in 1 2 3; do
    echo "round $round $work untraced $("$TORCH_PY" "${T[@]}" 2>/dev/null | json_line)" >> "$log"
    r=$(cudaprobe trace -o /tmp/torch.jsonl --force -- "$TORCH_PY" "${T[@]}" 2>/dev/null | json_line)
    echo "round $round $work trace-jsonl $r $(trailer /tmp/torch.jsonl cudaLaunchKernel)" >> "$log"
    [ "$round" = 1 ] && tail -1 /tmp/torch.jsonl > "$OUT/$work-trace-summary.json"
    r=$(cudaprobe trace --api runtime -o /tmp/torch1.jsonl --force -- "$TORCH_PY" "${T[@]}" \
        2>/dev/null | json_line)
    echo "round $round $work trace-runtime $r $(trailer /tmp/torch1.jsonl cudaLaunchKernel)" >> "$log"
    r=$(cudaprobe stats -- "$TORCH_PY" "${T[@]}" 2>/dev/null | json_line)
    echo "round $round $work stats $r" >> "$log"
    if [ -n "$NSYS" ]; then
      r=$("$NSYS" profile -t cuda -o "/tmp/nsys-$work-$round" --force-overwrite true \
          "$TORCH_PY" "${T[@]}" 2>/dev/null | json_line)
      echo "round $round $work nsys $r" >> "$log"
    fi
  done
}
if [ "${TORCH:-1}" = 1 ] && [ -x "$TORCH_PY" ]; then
  torch_loop torch --steps "$STEPS" --warmup "$WARMUP"
  torch_loop torchbig --steps 100 --warmup 10 --width 2048 --batch 4096
else
  echo "torch: skipped (TORCH=0 or no $TORCH_PY)" >> "$log"
fi
echo "nsys: ${NSYS:-not found (looked on PATH, /usr/local/cuda*/bin, /opt/nvidia/nsight-systems*, /usr/lib/nsight-systems*, the Nsight Compute host dir)}" >> "$log"

# medians per configuration, and the slowdown against untraced
python3 - "$log" > "$OUT/overhead-summary.txt" <<'EOF'
import json, re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\w+) ([\w-]+) (\{.*?\})", line)
    if m:
        runs.setdefault((m[1], m[2]), []).append(json.loads(m[3]))
for (work, key) in (("launch", "us_per_launch"), ("torch", "ms_per_step"),
                    ("torchbig", "ms_per_step")):
    base = [r[key] for r in runs.get((work, "untraced"), [])]
    for (w, config), rs in runs.items():
        if w != work:
            continue
        vals = [r[key] for r in rs]
        slow = (f"{statistics.median(vals) / statistics.median(base) - 1:+.1%}" if base else "")
        print(f"{work:<8} {config:<14} {key} {vals} median {statistics.median(vals)} {slow}")
EOF
cat "$log" "$OUT/overhead-summary.txt"
