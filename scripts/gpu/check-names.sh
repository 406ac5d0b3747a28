#!/usr/bin/env bash
# GPU check: every kernel named (docs/driver.md, "Kernel names"):
# PyTorch's launches named whole (not cut, not left mangled) on both layers,
# a program that launches two kernels and exits at once named every run,
# `stats --by kernel`, Chrome slices named by kernel, and the symbol reader on
# libtorch_cuda.so. Run on the device machine from the repo root with .gpukit
# and .whl carried:
#   bash scripts/gpu/check-names.sh
# Writes under $OUT: names-env.txt, torch-names.jsonl, torch-names.chrome.json,
# by-kernel.json, exit-runs.txt, libtorch-symbols.txt, names-summary.txt.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
W=tests/workloads
LIBCUDA=/usr/local/nvidia/lib64/libcuda.so.1
[ -e "$LIBCUDA" ] || LIBCUDA=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
LIBCUDART=$(ls /usr/local/cuda/lib64/libcudart.so.1* 2>/dev/null | head -1)
TORCH_LIB=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/torch/lib 2>/dev/null | head -1)
TORCH_CUDART=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcudart.so.* \
  2>/dev/null | head -1)
export CUDAPROBE_CACHE_DIR=$PWD/build/symcache  # fresh: what a first run on a machine sees
rm -rf "$CUDAPROBE_CACHE_DIR"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  uname -r; nvcc --version | tail -1; c++filt --version | head -1
  echo "libcuda: $LIBCUDA"; echo "libcudart: $LIBCUDART"; echo "torch's libcudart: $TORCH_CUDART"
} > "$OUT/names-env.txt" 2>&1

# PyTorch: elementwise kernels with long template names, cuBLAS, a reduction
cat > build/names_snippet.py <<'PY'
import torch
x = torch.randn(4096, 1024, device="cuda")
w = torch.randn(1024, 1024, device="cuda", requires_grad=True)
for _ in range(3):
    y = torch.nn.functional.gelu(x @ w).softmax(-1).sum()
    y.backward()
    w.grad.zero_()
torch.cuda.synchronize()
print("loss", y.item())
PY
cudaprobe trace --lib "${TORCH_CUDART:-$LIBCUDART}" --lib "$LIBCUDA" \
  -o "$OUT/torch-names.jsonl" --force -- "$TORCH_PY" build/names_snippet.py \
  > build/names-torch-out.txt 2>&1
echo "torch trace: exit $?" >> "$OUT/names-env.txt"
cudaprobe trace --lib "${TORCH_CUDART:-$LIBCUDART}" --lib "$LIBCUDA" \
  -o "$OUT/torch-names.chrome.json" --force -- "$TORCH_PY" build/names_snippet.py \
  > /dev/null 2>&1
cudaprobe stats --by kernel --json -o "$OUT/by-kernel.json" --force \
  --lib "${TORCH_CUDART:-$LIBCUDART}" --lib "$LIBCUDA" -- "$TORCH_PY" build/names_snippet.py \
  > /dev/null 2>&1
echo "stats --by kernel: exit $?" >> "$OUT/names-env.txt"

# a program that launches two kernels and exits at once: 10 runs, an empty
# symbol cache each time
nvcc -O1 -cudart=shared -o build/two_kernels $W/two_kernels.cu
for run in $(seq 1 10); do
  rm -rf "$CUDAPROBE_CACHE_DIR"
  cudaprobe trace --lib "$LIBCUDART" -o build/two.jsonl --force -- build/two_kernels \
    > /dev/null 2>&1
  python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])][:-1]
n=[len(c["args"].get("func_name") or "") for c in r if c["event"]=="cudaLaunchKernel"]
print("run", sys.argv[2], "launch name lengths", n, "ok" if n==[1149,17] else "NOT NAMED")' \
    build/two.jsonl "$run"
done > "$OUT/exit-runs.txt" 2>&1

# the symbol reader on the real thing
python3 benchmarks/symbols.py "$TORCH_LIB/libtorch_cuda.so" > "$OUT/libtorch-symbols.txt" 2>&1

python3 - "$OUT" <<'PY' > "$OUT/names-summary.txt"
import collections, json, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/torch-names.jsonl")]
calls, summary = rows[:-1], rows[-1]["summary"]
launches = [c for c in calls if c["category"] == "kernel" and "Graph" not in c["event"]]
print(f"== torch: {len(calls)} calls, lost {summary['lost_total']}, {len(launches)} launches")
by_event = collections.Counter((c["event"], bool(c["args"].get("func_name"))) for c in launches)
print("   (event, named):", dict(by_event))
names = [c["args"]["func_name"] for c in launches if c["args"].get("func_name")]
print(f"   named: {len(names)}, longest {max(map(len, names), default=0)} chars,"
      f" over 128: {sum(len(n) > 128 for n in names)},"
      f" still mangled (_Z...): {sum(n.startswith('_Z') for n in names)},"
      f" cut (…): {sum(n.endswith('…') for n in names)}")
for n, k in collections.Counter(names).most_common(8):
    print(f"   {k:>5} x [{len(n)}] {n[:200]}")
for c in [c for c in launches if not c["args"].get("func_name")][:5]:
    print(f"   unnamed: {c['event']} {c['details'][:160]}")
events = json.load(open(f"{out}/torch-names.chrome.json"))
x = [e for e in events if e.get("ph") == "X" and e.get("cat", "").endswith(",kernel")]
print(f"== chrome: {len(x)} launch slices, named by kernel: "
      f"{sum('call' in e['args'] for e in x)}; e.g. {[e['name'] for e in x[:3]]}")
report = json.load(open(f"{out}/by-kernel.json"))
print(f"== stats --by kernel: {len(report['functions'])} kernels, {report['calls']} launches,"
      f" lost {report['lost_total']}")
for f in report["functions"][:8]:
    print(f"   {f['count']:>5} x p50 {f['p50_ns']:>7} ns  [{len(f['event'])}] {f['event'][:120]}")
PY
cat "$OUT/names-summary.txt" "$OUT/exit-runs.txt" "$OUT/libtorch-symbols.txt"
