#!/usr/bin/env bash
# GPU check for the driver API and kernel names (docs/driver.md): a runtime
# program (kernels in the executable and in a shared library, templates), a
# driver-API program that loads PTX with cuModuleLoadData/cuLibraryLoadData,
# and a PyTorch snippet (cuBLAS, and Triton's driver launches where
# torch.compile works), each under `cudaprobe trace`. Run on the device
# machine from the repo root with .gpukit and .whl carried:
#   bash scripts/gpu/check-driver.sh
# Writes 7 files under $OUT: driver-env.txt, runtime.txt, runtime.jsonl,
# driver-api.txt, driver-api.jsonl, torch.jsonl, driver-summary.txt.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
W=tests/workloads
LIBCUDA=/usr/local/nvidia/lib64/libcuda.so.1
[ -e "$LIBCUDA" ] || LIBCUDA=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
LIBCUDART=$(ls /usr/local/cuda/lib64/libcudart.so.1* 2>/dev/null | head -1)
TORCH_CUDART=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcudart.so.* \
  2>/dev/null | head -1)
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  uname -r; nvcc --version | tail -1
  echo "libcuda: $LIBCUDA"; echo "libcudart: $LIBCUDART"; echo "torch's libcudart: $TORCH_CUDART"
} > "$OUT/driver-env.txt" 2>&1

# runtime: shared cudart, a kernel in libkern.so; every launch should be named
nvcc -O1 -shared -Xcompiler -fPIC -cudart=shared -o build/libkern.so $W/libkern.cu
nvcc -O1 -cudart=shared -DWITH_LIBKERN -o build/kernels $W/kernels.cu \
  -Lbuild -lkern -Xlinker -rpath,"$PWD/build"
cudaprobe trace --lib "$LIBCUDART" --lib "$LIBCUDA" -- build/kernels > "$OUT/runtime.txt" 2>&1
echo "exit status: $?" >> "$OUT/runtime.txt"
cudaprobe trace --lib "$LIBCUDART" --lib "$LIBCUDA" -o "$OUT/runtime.jsonl" --force \
  -- build/kernels > /dev/null 2>&1

# driver API: PTX through cuModuleLoadData and cuLibraryLoadData, handles named
nvcc --ptx -o build/driver_kernels.ptx $W/driver_kernels.cu
gcc -O1 -I/usr/local/cuda/include -o build/driver_vecadd $W/driver_vecadd.c "$LIBCUDA" \
  || gcc -O1 -DPRIMARY_CTX -I/usr/local/cuda/include -o build/driver_vecadd \
       $W/driver_vecadd.c "$LIBCUDA"  # a driver older than CUDA 13: no cuCtxCreate_v4
cudaprobe trace --api driver --lib "$LIBCUDA" -- build/driver_vecadd build/driver_kernels.ptx \
  > "$OUT/driver-api.txt" 2>&1
echo "exit status: $?" >> "$OUT/driver-api.txt"
cudaprobe trace --api driver --lib "$LIBCUDA" -o "$OUT/driver-api.jsonl" --force \
  -- build/driver_vecadd build/driver_kernels.ptx > /dev/null 2>&1

# PyTorch: its own libcudart and the driver; torch.compile's Triton kernels
# are loaded and launched through the driver API
cat > build/snippet.py <<'PY'
import torch
x = torch.randn(1024, 1024, device="cuda")
w = torch.randn(1024, 1024, device="cuda", requires_grad=True)
for _ in range(3):
    y = (x @ w).relu().sum()
    y.backward()
try:
    f = torch.compile(lambda a: (a * 2).sin() + 1)
    f(x); f(x)
    print("torch.compile: ok")
except Exception as e:  # no Triton, or no C compiler for its launcher
    print("torch.compile: unavailable:", type(e).__name__, str(e)[:200])
torch.cuda.synchronize()
print("loss", y.item())
PY
SECONDS=0
cudaprobe trace --lib "${TORCH_CUDART:-$LIBCUDART}" --lib "$LIBCUDA" -o "$OUT/torch.jsonl" \
  --force -- "$TORCH_PY" build/snippet.py > build/torch-out.txt 2>&1
echo "torch trace: exit $?, ${SECONDS} s" >> "$OUT/driver-env.txt"
tail -5 build/torch-out.txt >> "$OUT/driver-env.txt"

python3 - "$OUT" <<'PY' > "$OUT/driver-summary.txt"
import collections, json, sys
for name in ("runtime.jsonl", "driver-api.jsonl", "torch.jsonl"):
    try:
        rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{name}")]
    except (OSError, ValueError) as e:
        print(f"== {name}: unreadable: {e}")
        continue
    calls, summary = rows[:-1], rows[-1]["summary"]
    launches = [c for c in calls if c["category"] == "kernel" and "Graph" not in c["event"]]
    named = [c for c in launches if c["args"].get("func_name")]
    print(f"== {name}: {len(calls)} calls, lost {summary['lost_total']}, "
          f"{len(launches)} launches, {len(named)} named")
    print("   ret names:", dict(collections.Counter(c["ret_name"] for c in calls)))
    print("   launch events:", dict(collections.Counter(c["event"] for c in launches)))
    by_api = collections.Counter((c["api"], bool(c["args"].get("func_name"))) for c in launches)
    print("   (api, named):", dict(by_api))
    for c in [c for c in calls if c["category"] == "module"][:8]:
        print(f"   {c['event']:<26} {c['ret_name']:<14} {c['details'][:120]}")
    names = collections.Counter(c["args"]["func_name"] for c in named)
    for n, k in names.most_common(12):
        print(f"   {k:>5} x {n[:160]}")
    for c in [c for c in launches if not c["args"].get("func_name")][:5]:
        print(f"   unnamed: {c['event']} {c['details'][:160]}")
PY
cat "$OUT/driver-summary.txt"
