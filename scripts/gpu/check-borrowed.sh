#!/usr/bin/env bash
# Borrowed Python stacks on the GPU machine: benchmarks/pystacks_torch.py (an
# MLP, backward() from PyTorch's autograd threads, AdamW) traced with
# --py-stacks --gpu-time, launched and attached mid-run; borrowed_check.py
# gives the share of the kernels' GPU time with no Python line and checks each
# borrowed call's line against the workload's marker of backward(); then
# `stats --by line --gpu-time`. Summary: $OUT/borrowed.txt. Run from the repo
# root, .gpukit carried:  bash scripts/gpu/check-borrowed.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
txt=$OUT/borrowed.txt; : > "$txt"
{ date -u; nvidia-smi -L; } >> "$txt" 2>&1
W=benchmarks/pystacks_torch.py
echo "== launched" | tee -a "$txt"
timeout -k 10 240 python3 -m cudaprobe trace --py-stacks --gpu-time -e cudaLaunchKernel \
  -o /tmp/b-launched.jsonl -- $TORCH_PY $W --steps 200 > /tmp/b-launched.out 2> /tmp/b-launched.err
echo "exit $?" >> "$txt"
tail -3 /tmp/b-launched.err >> "$txt"
python3 scripts/gpu/borrowed_check.py /tmp/b-launched.jsonl $W >> "$txt" 2>&1
echo "== attached mid-run" | tee -a "$txt"
$TORCH_PY $W --steps 100000 > /tmp/b-workload.out 2>&1 &
P=$!
sleep 15
timeout -k 10 120 python3 -m cudaprobe trace --pid $P -d 8 --py-stacks --gpu-time \
  -e cudaLaunchKernel -o /tmp/b-attached.jsonl 2> /tmp/b-attached.err
echo "exit $? (124: -d over)" >> "$txt"
grep -v "^step" /tmp/b-attached.err | tail -8 >> "$txt"
python3 scripts/gpu/borrowed_check.py /tmp/b-attached.jsonl $W >> "$txt" 2>&1
kill $P; wait $P 2>/dev/null
echo "== stats --by line --gpu-time, launched" | tee -a "$txt"
timeout -k 10 240 python3 -m cudaprobe stats --by line --gpu-time -o - -- $TORCH_PY $W \
  --steps 200 2>&1 | grep -v "^step" | head -40 >> "$txt"
cat "$txt"
