#!/usr/bin/env bash
# GPU check for `cudaprobe serve --prometheus` (docs/prometheus.md): serve
# counts every process using torch's libcudart and the driver while a PyTorch
# loop (copies both ways, a matmul, allocations) runs beside it, not under it;
# /metrics is fetched while the loop holds its memory and again after it
# exits. Run on the device machine from the repo root with .gpukit and .whl
# carried (.whl holding a prometheus_client wheel):
#   bash scripts/gpu/check-serve.sh
# Writes under $OUT: serve-env.txt, serve-scrape.txt (the scrape while the
# loop runs) and serve-metrics.txt (the same, histogram buckets kept only for
# cudaMemcpyAsync), serve-after.txt (live and copied bytes after it exited: its
# live bytes gone), serve-stderr.txt (cudaprobe's lines and summary),
# serve-loop.txt.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
LIBCUDA=${LIBCUDA:-/usr/local/nvidia/lib64/libcuda.so.1}
[ -e "$LIBCUDA" ] || LIBCUDA=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
TORCH_CUDART=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcudart.so.* \
  2>/dev/null | head -1)
[ -n "$TORCH_CUDART" ] || TORCH_CUDART=$(ls /usr/local/cuda/lib64/libcudart.so.1* | head -1)
python3 -c 'import prometheus_client' 2>/dev/null || python3 -m pip install -q --no-index \
  --no-deps --target /tmp/site .whl/prometheus_client-*.whl
PORT=9464
scrape() { python3 -c "import urllib.request as u, sys
sys.stdout.write(u.urlopen('http://127.0.0.1:$PORT/metrics', timeout=10).read().decode())"; }
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  uname -r
  "$TORCH_PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "libcuda: $LIBCUDA"; echo "libcudart: $TORCH_CUDART"
} > "$OUT/serve-env.txt" 2>&1

# python3 itself, not common.sh's function: SIGTERM below must reach cudaprobe
python3 -m cudaprobe serve --prometheus ":$PORT" --lib "$TORCH_CUDART" --lib "$LIBCUDA" -d 120 \
  > /dev/null 2> "$OUT/serve-stderr.txt" &
serve=$!
for _ in $(seq 240); do grep -q "serving Prometheus" "$OUT/serve-stderr.txt" && break; sleep 0.5; done

# 20 steps: 64 MiB host-to-device, a matmul, 4 MiB back; 256 MiB held while scraped
cat > /tmp/serve_loop.py <<'PY'
import sys
import time
import torch
held = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
host = torch.randn(16 << 20).pin_memory()
for step in range(20):
    x = host.to("cuda", non_blocking=True)
    w = torch.randn(1024, 1024, device="cuda")
    y = (x[: 1 << 20].view(1024, 1024) @ w).sum(0)
    y.cpu()
torch.cuda.synchronize()
print("holding", flush=True)
sys.stdin.readline()
PY
mkfifo /tmp/serve_go
"$TORCH_PY" /tmp/serve_loop.py < /tmp/serve_go > "$OUT/serve-loop.txt" 2>&1 &
loop=$!
exec 3> /tmp/serve_go
for _ in $(seq 240); do grep -q holding "$OUT/serve-loop.txt" && break; sleep 0.5; done
sleep 2  # live bytes lag by the hold (0.25 s)
scrape > "$OUT/serve-scrape.txt"
awk '!/_bucket\{/ || /function="cudaMemcpyAsync"/' "$OUT/serve-scrape.txt" \
  > "$OUT/serve-metrics.txt"
exec 3>&-  # the loop reads EOF and exits
wait "$loop"
sleep 2
scrape | grep -E '^(# TYPE )?cudaprobe_(memory_live|memcpy)_bytes' > "$OUT/serve-after.txt"
kill -TERM "$serve"
wait "$serve"
echo "serve exit status: $?" >> "$OUT/serve-stderr.txt"
grep -vc "^#" "$OUT/serve-scrape.txt" | sed 's/^/samples scraped: /' >> "$OUT/serve-env.txt"
rm -f /tmp/serve_go
