#!/usr/bin/env bash
# GPU check of how long cudaprobe takes to start and stop around a program
# that makes no call, beside bpftrace with one probe (benchmarks/start.py):
# `trace --force -o FILE -- /bin/true` with the compiled program in the cache,
# with an empty cache (bcc compiles), and bpftrace -e 'uprobe:LIB:cudaMalloc {}'
# -c /bin/true, round by round. Goal: the cached start within 2x bpftrace's.
# With .whl holding click, rich and their wheels, the same with the system's
# /usr/bin/python3 (cudaprobe in a Python of its own, not the PyTorch venv's).
# Results: $OUT/start.txt, $OUT/start.json. Run from the repo root, .gpukit carried:
#   bash scripts/gpu/check-start.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
txt=$OUT/start.txt; : > "$txt"
{ date -u; uname -r; nproc; bpftrace --version
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  git rev-parse --short HEAD 2>/dev/null; } >> "$txt" 2>&1
LIB=$(ls /usr/local/cuda/lib64/libcudart.so.* 2>/dev/null | head -1)
python3 benchmarks/start.py --rounds 11 --lib "${LIB:-/usr/local/cuda/lib64/libcudart.so}" \
  --json "$OUT/start.json" >> "$txt" 2>&1
echo "exit status: $?" >> "$txt"
# cudaprobe in a Python of its own, as scripts/setup makes it (the system's, its
# wheels beside it: click, rich and theirs carried in .whl), not the PyTorch venv's
if [ -d .whl ] && /usr/bin/python3 -m pip install -q --no-index --no-deps --target /tmp/sys \
    .whl/click-*.whl .whl/rich-*.whl .whl/markdown_it_py-*.whl .whl/mdurl-*.whl \
    .whl/pygments-*.whl 2>/dev/null; then
  echo "== /usr/bin/python3 ($(/usr/bin/python3 -V)), its own site: /tmp/sys" >> "$txt"
  PYTHONPATH=/tmp/sys:$PYTHONPATH /usr/bin/python3 benchmarks/start.py --rounds 11 \
    --lib "${LIB:-/usr/local/cuda/lib64/libcudart.so}" --json "$OUT/start-sys.json" >> "$txt" 2>&1
fi
cat "$txt"
