#!/usr/bin/env bash
# The README's examples, run for real on the GPU machine: each command as a
# user types it at a terminal (under a pty, 100 columns), its output saved
# under $OUT (ex-*.txt, with the terminal's colours in ex-*.ansi), and a short
# --gpu-time Chrome trace of a PyTorch step for the timeline picture.
# Run from the repo root with .gpukit carried:  bash scripts/gpu/readme-examples.sh
# Then here: scripts/draw-timeline OUT/run.chrome.json.gz docs/img/timeline.svg
#            scripts/ansi-to-svg OUT/ex-trace.ansi docs/img/trace.svg
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
{ nvidia-smi -L; uname -r; nvcc --version | tail -1; } > "$OUT/ex-env.txt" 2>&1
nvcc -cudart=shared -o build/demo examples/demo.cu
nvcc -cudart=shared -g -O1 -Xcompiler -fno-omit-frame-pointer -o build/leak_two \
  tests/workloads/leak_two.cu
MLP=(benchmarks/torch_workloads.py mlp --warmup 20)

# at_terminal NAME COMMAND...: as seen at a 100-column terminal
at_terminal() {
  local name=$1; shift
  echo "== $name: $*"
  COLUMNS=100 LINES=50 script -qec "$*" /dev/null > "$OUT/ex-$name.ansi" 2>&1
  sed -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g' -e 's/\r$//' "$OUT/ex-$name.ansi" > "$OUT/ex-$name.txt"
  head -c 3000 "$OUT/ex-$name.txt"
}

at_terminal trace "python3 -m cudaprobe trace -- build/demo"
at_terminal stats "python3 -m cudaprobe stats -- $TORCH_PY ${MLP[*]} --iters 200"
at_terminal memory "python3 -m cudaprobe memory --stacks -- build/leak_two"
at_terminal stats-gpu "python3 -m cudaprobe stats --gpu-time --by kernel -- $TORCH_PY ${MLP[*]} --iters 200"
at_terminal by-line "python3 -m cudaprobe stats --by line --gpu-time -- $TORCH_PY benchmarks/pystacks_torch.py --steps 100"

echo "== attach"
"$TORCH_PY" "${MLP[@]}" --seconds 40 > "$OUT/ex-mlp.txt" 2>&1 &
pid=$!
sleep 10
at_terminal attach "python3 -m cudaprobe trace --pid $pid -d 5 -o /tmp/calls.jsonl"
at_terminal attach-gpu "python3 -m cudaprobe stats --pid $pid --gpu-time --by kernel -d 5"
kill "$pid"; wait "$pid" 2>/dev/null

echo "== chrome"
python3 -m cudaprobe trace --gpu-time -o /tmp/run.chrome.json --force -- \
  "$TORCH_PY" "${MLP[@]}" --iters 30 > "$OUT/ex-chrome.txt" 2>&1
gzip -c /tmp/run.chrome.json > "$OUT/run.chrome.json.gz"
ls -la "$OUT"
