#!/usr/bin/env bash
# --gpu-time on a running PyTorch job, joined to its rows: benchmarks/pystacks_torch.py
# started alone, then `trace --pid P --gpu-time` (JSONL, then Chrome), checked
# by join_check.py against the GPU's own order and CUPTI's kernel names; the
# wall time of `trace --pid P -d 8` and of `stats --pid P --gpu-time -d 1.5`
# (with the window it reports). Summary: $OUT/join.txt. Run from the repo
# root, .gpukit carried:  bash scripts/gpu/check-attach-join.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
txt=$OUT/join.txt; : > "$txt"
{ date -u; nvidia-smi -L; git log --oneline -1; } >> "$txt" 2>&1
W=benchmarks/pystacks_torch.py
$TORCH_PY $W --steps 1000000 > /tmp/j-workload.out 2>&1 &
P=$!
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
until grep -q "^step 100 " /tmp/j-workload.out; do sleep 0.5; done
wall() {  # the command's exit status and wall time (no bc on the GPU machine)
  local s rc; s=$(date +%s%N); "$@"; rc=$?
  echo "exit $rc, wall $(( ($(date +%s%N) - s) / 1000000 )) ms"
}
echo "== trace --pid P -d 5 --gpu-time -o jsonl" | tee -a "$txt"
wall timeout -k 10 120 python3 -m cudaprobe trace --pid $P -d 5 --gpu-time \
  -o /tmp/j.jsonl 2> /tmp/j.err >> "$txt"
grep -v "^step" /tmp/j.err | tail -6 >> "$txt"
echo "== trace --pid P -d 3 --gpu-time -o chrome" | tee -a "$txt"
wall timeout -k 10 120 python3 -m cudaprobe trace --pid $P -d 3 --gpu-time \
  -o /tmp/j.chrome.json 2> /tmp/jc.err >> "$txt"
grep -v "^step" /tmp/jc.err | tail -4 >> "$txt"
python3 scripts/gpu/join_check.py /tmp/j.jsonl /tmp/j.chrome.json >> "$txt" 2>&1
echo "== trace --pid P -d 8 -o jsonl (no --gpu-time)" | tee -a "$txt"
wall timeout -k 10 120 python3 -m cudaprobe trace --pid $P -d 8 -o /tmp/j8.jsonl \
  2> /tmp/j8.err >> "$txt"
tail -2 /tmp/j8.err >> "$txt"
echo "== stats --pid P --gpu-time -d 1.5 --json" | tee -a "$txt"
wall timeout -k 10 120 python3 -m cudaprobe stats --pid $P --gpu-time -d 1.5 --json \
  -o /tmp/js.json 2> /tmp/js.err >> "$txt"
grep -v "^step" /tmp/js.err | tail -4 >> "$txt"
python3 -c "import json; d=json.load(open('/tmp/js.json')); print('duration_s', d.get('duration_s'), 'kernels timed', sum(k['calls'] for k in d['gpu']['kernels']))" >> "$txt" 2>&1
kill $P; wait $P 2>/dev/null
tail -2 /tmp/j-workload.out >> "$txt"
cat "$txt"
