#!/usr/bin/env bash
# Backward kernels on their forward line, on the GPU machine:
# benchmarks/backward_torch.py (a 4-layer transformer, bf16 autocast, AdamW)
# traced with --py-stacks --gpu-time, launched and attached mid-run;
# backward_check.py compares where the backward kernels' GPU time falls with
# torch.profiler's own link (a separate run with with_stack, --profile), and
# gives the share with no Python line; then `stats --by line --gpu-time
# --folded`. PART=cost instead measures the workload's ms/step untraced, under
# cudaprobe without and with --py-stacks, and under Nsight Systems without and
# with --python-backtrace=cuda; PART=compile checks the workload torch.compile'd.
# Summary: $OUT/backward.txt (or backward-cost.txt, backward-compile.txt).
# Run from the repo root, .gpukit carried:  bash scripts/gpu/check-backward.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
W=benchmarks/backward_torch.py
if [ "${PART:-check}" = compile ]; then  # torch.compile: the backward is one compiled node
  txt=$OUT/backward-compile.txt; : > "$txt"
  { date -u; nvidia-smi -L; } >> "$txt" 2>&1
  timeout -k 10 300 $TORCH_PY $W --compile --steps 30 --warmup 10 --profile $OUT/oracle-compile.json \
    > /tmp/bwc-oracle.out 2>&1
  echo "oracle exit $?" >> "$txt"
  timeout -k 10 300 python3 -m cudaprobe trace --py-stacks --gpu-time -e kernel \
    -o /tmp/bwc.jsonl -- $TORCH_PY $W --compile --steps 100 > /tmp/bwc.out 2> /tmp/bwc.err
  echo "traced exit $?" >> "$txt"
  grep -v "^step\|Warning\|warn(\|━━\|┃" /tmp/bwc.err | tail -6 >> "$txt"
  python3 scripts/gpu/backward_check.py /tmp/bwc.jsonl $W $OUT/oracle-compile.json >> "$txt" 2>&1
  cat "$txt"
  exit 0
fi
if [ "${PART:-check}" = cost ]; then
  txt=$OUT/backward-cost.txt; : > "$txt"
  { date -u; nvidia-smi -L; } >> "$txt" 2>&1
  N=${STEPS:-300}
  run() {  # run NAME COMMAND...: the workload's own ms/step under COMMAND
    local name=$1; shift
    echo "== $name" | tee -a "$txt"
    timeout -k 10 300 "$@" > /tmp/cost-$name.out 2> /tmp/cost-$name.err
    echo "$name exit $? $(grep ms_per_step /tmp/cost-$name.out)" | tee -a "$txt"
    grep -v "^step\|Warning\|warn(" /tmp/cost-$name.err | tail -3 >> "$txt"
  }
  NSYS=$(find_nsys)
  for rep in 1 2; do
    run plain$rep $TORCH_PY $W --steps $N
    run cudaprobe$rep python3 -m cudaprobe trace -o /tmp/cost.jsonl --force -- $TORCH_PY $W --steps $N
    run pystacks$rep python3 -m cudaprobe trace --py-stacks -o /tmp/cost.jsonl --force -- $TORCH_PY $W --steps $N
    if [ -n "$NSYS" ]; then
      run nsys$rep $NSYS profile --trace=cuda --sample=none --cpuctxsw=none -o /tmp/cost-nsys -f true $TORCH_PY $W --steps $N
      run nsysbt$rep $NSYS profile --trace=cuda --sample=none --cpuctxsw=none --python-backtrace=cuda -o /tmp/cost-nsysbt -f true $TORCH_PY $W --steps $N
    fi
  done
  $NSYS --version >> "$txt" 2>&1
  cat "$txt"
  exit 0
fi
txt=$OUT/backward.txt; : > "$txt"
{ date -u; nvidia-smi -L; $TORCH_PY -c "import torch; print('torch', torch.__version__)"; } >> "$txt" 2>&1
echo "== torch.profiler's link (the oracle)" | tee -a "$txt"
timeout -k 10 240 $TORCH_PY $W --steps 30 --warmup 10 --profile $OUT/oracle.json > /tmp/bw-oracle.out 2>&1
echo "exit $?" >> "$txt"; tail -2 /tmp/bw-oracle.out >> "$txt"
echo "== launched" | tee -a "$txt"
timeout -k 10 240 python3 -m cudaprobe trace --py-stacks --gpu-time -e kernel \
  -o /tmp/bw-launched.jsonl -- $TORCH_PY $W --steps 100 > /tmp/bw-launched.out 2> /tmp/bw-launched.err
echo "exit $?" >> "$txt"
grep -v "^step\|Warning\|warn(" /tmp/bw-launched.err | tail -8 >> "$txt"
python3 scripts/gpu/backward_check.py /tmp/bw-launched.jsonl $W $OUT/oracle.json >> "$txt" 2>&1
echo "== attached mid-run" | tee -a "$txt"
$TORCH_PY $W --steps 100000 > /tmp/bw-workload.out 2>&1 &
P=$!
sleep 20
timeout -k 10 120 python3 -m cudaprobe trace --pid $P -d 8 --py-stacks --gpu-time -e kernel \
  -o /tmp/bw-attached.jsonl 2> /tmp/bw-attached.err
echo "exit $? (124: -d over)" >> "$txt"
grep -v "^step" /tmp/bw-attached.err | tail -8 >> "$txt"
python3 scripts/gpu/backward_check.py /tmp/bw-attached.jsonl $W $OUT/oracle.json >> "$txt" 2>&1
kill $P; wait $P 2>/dev/null
echo "== stats --by line --gpu-time --folded, launched" | tee -a "$txt"
timeout -k 10 240 python3 -m cudaprobe stats --by line --gpu-time --folded $OUT/backward.folded \
  -e kernel -- $TORCH_PY $W --steps 100 > /tmp/bw-stats.out 2>&1
echo "exit $?" >> "$txt"
grep -v "^step" /tmp/bw-stats.out | sed -n '/GPU time of the kernels/,$p' | head -30 >> "$txt"
awk '{print $NF"\t"$0}' $OUT/backward.folded | sort -n | tail -3 | cut -c1-400 >> "$txt"
gzip -f $OUT/backward.folded
cat "$txt"
