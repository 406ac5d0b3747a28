#!/usr/bin/env bash
# GPU check for `cudaprobe trace --format chrome` (docs/chrome.md): the PyTorch
# snippet traced with its own libcudart and the driver, written as Chrome Trace
# Event JSON, then checked and counted per track (slices, flows) by
# tests/chrome_check.py. Run on the device machine from the repo root with
# .gpukit and .whl carried:  bash scripts/gpu/check-chrome.sh
# Writes 5 files under $OUT: chrome-env.txt, chrome-run.txt (the snippet's
# output and cudaprobe's summary), chrome-summary.txt (the checker's report),
# chrome-head.txt (the trace's first 40 events) and chrome-torch.json.gz (the
# trace, unless it is over 20 MB compressed). The trace itself stays in build/.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
LIBCUDA=${LIBCUDA:-/usr/local/nvidia/lib64/libcuda.so.1}
[ -e "$LIBCUDA" ] || LIBCUDA=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
LIBCUDART=$(ls /usr/local/cuda/lib64/libcudart.so.1* 2>/dev/null | head -1)
TORCH_CUDART=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcudart.so.* \
  2>/dev/null | head -1)
TRACE=build/torch.chrome.json
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  uname -r
  echo "libcuda: $LIBCUDA"; echo "torch's libcudart: ${TORCH_CUDART:-none, so $LIBCUDART}"
} > "$OUT/chrome-env.txt" 2>&1

SECONDS=0
cudaprobe trace --lib "${TORCH_CUDART:-$LIBCUDART}" --lib "$LIBCUDA" -o "$TRACE" --force \
  -- "$TORCH_PY" scripts/gpu/torch_snippet.py > "$OUT/chrome-run.txt" 2>&1
echo "trace: exit $?, ${SECONDS} s, $(stat -c %s "$TRACE" 2>&1) bytes" >> "$OUT/chrome-env.txt"

python3 tests/chrome_check.py "$TRACE" > "$OUT/chrome-summary.txt" 2>&1
echo "chrome_check exit status: $?" >> "$OUT/chrome-summary.txt"
head -n 41 "$TRACE" > "$OUT/chrome-head.txt"
gzip -c "$TRACE" > "$OUT/chrome-torch.json.gz"
if [ "$(stat -c %s "$OUT/chrome-torch.json.gz")" -gt 20000000 ]; then
  rm "$OUT/chrome-torch.json.gz"
  echo "trace not kept: over 20 MB compressed" >> "$OUT/chrome-env.txt"
fi
cat "$OUT/chrome-env.txt" "$OUT/chrome-summary.txt"
