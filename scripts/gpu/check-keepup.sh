#!/usr/bin/env bash
# Keeping up with real programs and naming their kernels,
# on the GPU machine, checked against an independent count: the CUPTI
# callback counter (benchmarks/oracle/cupti_counter.c, loaded with
# CUDA_INJECTION64_PATH) counts every runtime and driver call, and
# benchmarks/oracle/compare.py sets it beside what the trace recorded.
#
# For each PyTorch workload of benchmarks/torch_workloads.py (WORKLOADS):
#   cmd   cudaprobe trace -f jsonl -- python torch_workloads.py W, under the counter
#   child the same python as a child of the command (sh -c '...; true')
#   pid   the workload started alone (under the counter), cudaprobe trace --pid
#         attached after its warm-up (kernels loaded and named before the attach),
#         detached after the measured part: the counter's window is the same part
# then the formats (csv, chrome, table) on the loop, for losses, and the
# launch-bound MLP step timed untraced, traced (both modes' default event set)
# and under Nsight Systems, interleaved, ROUNDS rounds.
# Results: $OUT/keepup.txt (readable), $OUT/keepup.jsonl (one object per run).
# Run from the repo root, .gpukit and .whl carried: bash scripts/gpu/check-keepup.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKLOADS=${WORKLOADS:-loop mlp gemm compile}
ROUNDS=${ROUNDS:-3}
CUPTI_LIB=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda-*/ -name 'libcupti.so' 2>/dev/null | head -1)")
ORACLE=/tmp/cupti_counter.so
gcc -O2 -shared -fPIC -o $ORACLE benchmarks/oracle/cupti_counter.c -I/usr/local/cuda/include \
  -I/usr/local/cuda/extras/CUPTI/include -L"$CUPTI_LIB" -lcupti -Wl,-rpath,"$CUPTI_LIB" || exit 1
NSYS=$(find_nsys)
W="$TORCH_PY benchmarks/torch_workloads.py"
txt=$OUT/keepup.txt; jl=$OUT/keepup.jsonl; : > "$txt"; : > "$jl"
args_of() { case $1 in loop) echo "--seconds 3";; mlp) echo "--iters 300";;
                       gemm) echo "--iters 100";; compile) echo "--iters 300";; esac; }
waitfor() {  # $1: a test command, $2: seconds; false (and a note) if it never holds
  local n=0
  until eval "$1"; do
    sleep 0.1; n=$((n + 1))
    [ $n -gt $(($2 * 10)) ] && { echo "TIMEOUT waiting for: $1" >> "$txt"; return 1; }
  done
  return 0
}
record() {  # $1 label, $2 counts file, $3 trace, $4 --window or ""
  echo "== $1" >> "$txt"
  python3 benchmarks/oracle/compare.py "$2" "$3" $4 --json /tmp/cmp.json >> "$txt" 2>&1
  python3 -c 'import json,sys; d=json.load(open("/tmp/cmp.json")); d.pop("untraced");
d["run"]=sys.argv[1]; print(json.dumps(d))' "$1" >> "$jl"
}

for w in $WORKLOADS; do
  a=$(args_of "$w")
  # -- python, under the counter
  CUDA_INJECTION64_PATH=$ORACLE CUPTI_COUNTER_OUT=/tmp/$w-cmd.cupti \
    cudaprobe trace -f jsonl -o /tmp/$w-cmd.jsonl --force -- $W "$w" $a 2>/tmp/$w-cmd.err
  tail -2 /tmp/$w-cmd.err >> "$txt"
  record "$w cmd" /tmp/$w-cmd.cupti /tmp/$w-cmd.jsonl ""
  # a child of the command (sh forks python: `; true` follows), traced once its own links are in
  CUDA_INJECTION64_PATH=$ORACLE CUPTI_COUNTER_OUT=/tmp/$w-child.cupti \
    cudaprobe trace -f jsonl -o /tmp/$w-child.jsonl --force -- sh -c "$W $w $a; true" \
    2>/tmp/$w-child.err
  tail -2 /tmp/$w-child.err >> "$txt"
  record "$w child" /tmp/$w-child.cupti /tmp/$w-child.jsonl ""
  # --pid, attached after the warm-up
  rm -f /tmp/$w.ready /tmp/$w.go /tmp/$w.done /tmp/$w.quit /tmp/$w-pid.cupti.window
  CUDA_INJECTION64_PATH=$ORACLE CUPTI_COUNTER_OUT=/tmp/$w-pid.cupti $W "$w" $a \
    --ready /tmp/$w.ready --go /tmp/$w.go --done /tmp/$w.done --quit /tmp/$w.quit > /tmp/$w-pid.out &
  wpid=$!
  waitfor "[ -e /tmp/$w.ready ]" 120
  start=$(date +%s.%N)
  # python itself in the background, not the cudaprobe() function: $! must be its pid
  python3 -m cudaprobe trace --pid $wpid -f jsonl -o /tmp/$w-pid.jsonl --force 2>/tmp/$w-pid.err &
  tpid=$!
  if waitfor "grep -q 'attached to' /tmp/$w-pid.err || ! kill -0 $tpid 2>/dev/null" 120; then
    echo "$w pid: attached in $(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$start" "$(date +%s.%N)") s" >> "$txt"
    touch /tmp/$w.go
    waitfor "[ -e /tmp/$w.done ]" 120
  fi
  kill -TERM $tpid 2>/dev/null; wait $tpid  # (a job started with & ignores SIGINT)
  touch /tmp/$w.go /tmp/$w.quit; wait $wpid
  grep -v "SyntaxWarning\|re.match" /tmp/$w-pid.err | tail -3 >> "$txt"
  [ -e /tmp/$w-pid.cupti.window ] && record "$w pid" /tmp/$w-pid.cupti.window /tmp/$w-pid.jsonl --window
done

# the other formats on the loop: losses (the summary line on stderr)
for f in csv chrome table; do
  cudaprobe trace -f $f -o /tmp/loop.$f --force -- $W loop --seconds 3 2>/tmp/loop-$f.err >/dev/null
  echo "loop format $f: $(grep -E 'calls in .* lost' /tmp/loop-$f.err | tail -1)" >> "$txt"
done

# the launch-bound MLP step: untraced, traced (cmd and pid), nsys; interleaved
for round in $(seq "$ROUNDS"); do
  echo "round $round mlp untraced $($W mlp --iters 300)" >> "$txt"
  echo "round $round mlp trace $(cudaprobe trace -f jsonl -o /tmp/t.jsonl --force -- $W mlp --iters 300 2>/dev/null)" >> "$txt"
  echo "round $round mlp trace-all $(cudaprobe trace -e all -f jsonl -o /tmp/t.jsonl --force -- $W mlp --iters 300 2>/dev/null)" >> "$txt"
  if [ -n "$NSYS" ]; then
    echo "round $round mlp nsys $("$NSYS" profile -t cuda -o /tmp/nsys-mlp --force-overwrite true $W mlp --iters 300 2>/dev/null | grep '^{')" >> "$txt"
  fi
done
echo "nsys: ${NSYS:-not found}" >> "$txt"
cat "$txt"
