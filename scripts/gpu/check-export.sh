#!/usr/bin/env bash
# GPU check for `cudaprobe export bpftrace` (docs/export.md): the exported
# script runs under the kit's bpftrace on the demo (examples/demo.cu, shared
# cudart) and on a PyTorch snippet, next to `cudaprobe trace` on the same
# programs. Run on the device machine from the repo root with .gpukit and
# .whl carried:  bash scripts/gpu/check-export.sh
# Writes under $OUT: export-env.txt; export-demo.bt and export-demo.txt (the
# script and what it printed), export-demo-trace.jsonl (cudaprobe trace of
# the demo), export-demo-all.txt (runtime and driver), export-demo-summary.txt
# (--summary), export-torch.bt and export-torch.txt, export-torch-summary.txt,
# and export-check.txt, which compares them; all but export-env.txt and
# export-check.txt packed at the end into export-files.tar.gz (the device tool
# brings back about 8 files).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
LIBCUDA=/usr/local/nvidia/lib64/libcuda.so.1
[ -e "$LIBCUDA" ] || LIBCUDA=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
nvcc -cudart=shared -o build/demo examples/demo.cu
DEMO_CUDART=$(ldd build/demo | awk '/libcudart\.so/{print $3; exit}')
TORCH_CUDART=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcudart.so.* \
  2>/dev/null | head -1)
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  uname -r; nvcc --version | tail -1; bpftrace --version
  echo "libcuda: $LIBCUDA"; echo "demo's libcudart: $DEMO_CUDART"
  echo "torch's libcudart: $TORCH_CUDART"
} > "$OUT/export-env.txt" 2>&1

# run_script NAME SCRIPT COMMAND: bpftrace's output in NAME.txt, its stderr
# and exit status after it
run_script() {
  BPFTRACE_PERF_RB_PAGES=1024 bpftrace -o "$OUT/$1.txt" "$2" -c "$3" > "$OUT/$1.stderr" 2>&1
  echo "bpftrace exit status: $?" >> "$OUT/$1.stderr"
}

# the demo: runtime calls, one line each; the same run under cudaprobe trace
cudaprobe export bpftrace --lib "$DEMO_CUDART" -o "$OUT/export-demo.bt" --force
run_script export-demo "$OUT/export-demo.bt" build/demo
cudaprobe trace --lib "$DEMO_CUDART" -o "$OUT/export-demo-trace.jsonl" --force -- build/demo \
  > /dev/null 2>&1
# runtime and driver together: what cudart itself calls in libcuda shows too
cudaprobe export bpftrace --lib "$DEMO_CUDART" --lib "$LIBCUDA" -o "$OUT/export-demo-all.bt" \
  --force
run_script export-demo-all "$OUT/export-demo-all.bt" build/demo
cudaprobe export bpftrace --lib "$DEMO_CUDART" --summary -o "$OUT/export-demo-summary.bt" \
  --force
run_script export-demo-summary "$OUT/export-demo-summary.bt" build/demo

# PyTorch: its own libcudart (pip wheel) and the driver, the busy categories only
cudaprobe export bpftrace --lib "$TORCH_CUDART" --lib "$LIBCUDA" -e memory,transfer,kernel,sync \
  -o "$OUT/export-torch.bt" --force
run_script export-torch "$OUT/export-torch.bt" "$TORCH_PY scripts/gpu/torch_snippet.py"
cudaprobe export bpftrace --lib "$TORCH_CUDART" --lib "$LIBCUDA" --summary \
  -o "$OUT/export-torch-summary.bt" --force
run_script export-torch-summary "$OUT/export-torch-summary.bt" "$TORCH_PY scripts/gpu/torch_snippet.py"

python3 - "$OUT" <<'PY' > "$OUT/export-check.txt" 2>&1
import collections, json, re, sys
out = sys.argv[1]

def rows(name, process=None):
    """(EVENT, RESULT, DETAILS) of each line (the banner's column widths)."""
    text = open(f"{out}/{name}.txt").read()
    lines = [l for l in text.splitlines() if re.match(r" *\d+\.\d{3} ", l)]
    return text, [(l[43:69].strip(), l[81:109].strip(), l[110:]) for l in lines
                  if process is None or l[11:26].strip() == process]

for name, process in (("export-demo", "demo"), ("export-demo-all", "demo"), ("export-torch", None)):
    text, calls = rows(name, process)
    lost = re.findall(r"Lost \d+ events", text)
    print(f"== {name}: {len(calls)} lines; lost: {lost}")
    print("   stderr:", open(f"{out}/{name}.stderr").read().strip().splitlines()[-3:])
    print("   results:", dict(collections.Counter(r for _, r, _ in calls)))
    print("   events:", dict(collections.Counter(e for e, _, _ in calls).most_common(15)))
    launches = [d for e, _, d in calls if e.startswith("cudaLaunchKernel")]
    named = [d for d in launches if re.match(r"func=(0x[0-9a-f]+) (?!\1)", d)]
    print(f"   kernel launches: {len(launches)}, named by usym(): {len(named)}")
    for e, r, d in [c for c in calls if c[0] in ("cudaMalloc", "cudaMemcpy", "cudaLaunchKernel",
                                                  "cudaEventElapsedTime", "cuLaunchKernel",
                                                  "cuMemAlloc_v2")][:8]:
        print(f"   {e:<22} {r:<14} {d[:150]}")

trace = [json.loads(l) for l in open(f"{out}/export-demo-trace.jsonl")][:-1]
_, calls = rows("export-demo", "demo")  # the scripts see every process
same = collections.Counter(c["event"] for c in trace) == collections.Counter(e for e, _, _ in calls)
print(f"== demo: cudaprobe trace {len(trace)} calls, bpftrace script {len(calls)} lines; "
      f"same calls per function: {same}")
for name in ("export-demo-summary", "export-torch-summary"):
    text = open(f"{out}/{name}.txt").read()
    print(f"== {name}:", open(f"{out}/{name}.stderr").read().strip().splitlines()[-1:])
    print("\n".join(l for l in text.splitlines() if l.startswith(("@calls", "@errors"))))
PY
pack_out export-files.tar.gz export-env.txt export-check.txt
cat "$OUT/export-check.txt"
