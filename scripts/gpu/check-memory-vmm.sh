#!/usr/bin/env bash
# GPU check for `cudaprobe memory` on the memory PyTorch really uses
# (virtual memory, pools, registered host memory): a PyTorch script that reserves 932 MiB in four tensors, frees the
# last one and empties the cache, run under `memory` with the default caching
# allocator (cudaMalloc/cudaFree) and with
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (cuMemAddressReserve,
# cuMemCreate, cuMemMap, cuMemSetAccess; cuMemUnmap and cuMemRelease when the
# cache is emptied); cudaprobe's peak and what it finds left at exit are
# compared with torch.cuda.max_memory_reserved() and memory_reserved() as the
# script prints them. Then tests/workloads/memory_vmm.c (virtual memory as
# PyTorch and NVIDIA's samples use it, pools and registered host memory at
# both layers) on the real runtime and driver, its leak report against what the
# program says it left.
# Run on the device machine from the repo root with .gpukit and .whl carried:
#   bash scripts/gpu/check-memory-vmm.sh
# Writes under $OUT (6 files): vmm-env.txt; vmm-torch-default.txt and
# vmm-torch-expandable.txt (the script's own line, then cudaprobe's output);
# vmm-sample.txt; vmm-summary.txt, with one OK/MISMATCH line per comparison;
# vmm-traces.tar.gz, the three JSON reports.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
{ nvidia-smi -L; uname -r; nvcc --version | tail -1; "$TORCH_PY" -c 'import torch;
print("torch", torch.__version__, "cuda", torch.version.cuda)'; } > "$OUT/vmm-env.txt" 2>&1

cat > /tmp/reserve.py <<'PY'
import json, os, torch
MiB = 1 << 20
tensors = [torch.empty(n * MiB, dtype=torch.uint8, device="cuda") for n in (256, 256, 256, 164)]
for t in tensors:
    t.fill_(1)
del t  # the loop's name holds the last tensor too
torch.cuda.synchronize()
peak = torch.cuda.memory_reserved()
del tensors[-1]
torch.cuda.empty_cache()  # the default allocator cudaFrees the segment; expandable ones unmap
torch.cuda.synchronize()
print(json.dumps({"alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                  "reserved_peak": peak, "max_reserved": torch.cuda.max_memory_reserved(),
                  "reserved_at_exit": torch.cuda.memory_reserved(),
                  "allocated_at_exit": torch.cuda.memory_allocated()}))
PY
unset PYTORCH_CUDA_ALLOC_CONF
for mode in default expandable; do
  [ $mode = expandable ] && export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  cudaprobe memory --json -o "$OUT/vmm-torch-$mode.json" --force -- "$TORCH_PY" \
    /tmp/reserve.py > "$OUT/vmm-torch-$mode.txt" 2>&1
  echo "exit status: $?" >> "$OUT/vmm-torch-$mode.txt"
done
unset PYTORCH_CUDA_ALLOC_CONF

# the driver's libcuda, as check-driver.sh finds it (the toolkit has no stub to link)
LIBCUDA=/usr/local/nvidia/lib64/libcuda.so.1
[ -e "$LIBCUDA" ] || LIBCUDA=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
echo "libcuda: $LIBCUDA" >> "$OUT/vmm-env.txt"
gcc -O1 -g -fno-omit-frame-pointer -I/usr/local/cuda/include -o build/memory_vmm \
  tests/workloads/memory_vmm.c -L/usr/local/cuda/lib64 -lcudart -Wl,-rpath,/usr/local/cuda/lib64 \
  "$LIBCUDA"
cudaprobe memory --json -o "$OUT/vmm-sample.json" --force -- build/memory_vmm 300 \
  > "$OUT/vmm-sample.txt" 2>&1
echo "exit status: $?" >> "$OUT/vmm-sample.txt"

python3 - "$OUT" <<'PY' > "$OUT/vmm-summary.txt" 2>&1
import json, sys
from collections import Counter
out, MiB = sys.argv[1], 1 << 20


def lines(name):
    return [json.loads(x) for x in open(f"{out}/{name}.txt") if x.startswith("{")]


def process(name, comm):
    try:
        report = json.load(open(f"{out}/{name}.json"))
    except (OSError, ValueError) as e:
        print(f"{name}: {e}")
        return None
    found = [p for p in report["processes"] if p["process"].startswith(comm)]
    print(f"{name}: lost {report['lost_total']}, libraries {report['libraries']}")
    return found[0] if found else None


def verdict(what, got, want):
    print(f"  {what}: cudaprobe {got / MiB:.1f} MiB, program {want / MiB:.1f} MiB:",
          "OK" if got == want else "MISMATCH")


for mode, kind in (("default", "device"), ("expandable", "vmm")):
    name = f"vmm-torch-{mode}"
    [torch] = lines(name) or [None]
    p = process(name, "python")
    if torch is None or p is None:
        print(f"  {name}: no result (see {name}.txt)")
        continue
    events = Counter(g["event"] for g in p["leaks"] + p["live"] for _ in g["allocations"])
    print(f"  torch says: {torch}")
    print(f"  cudaprobe: {p['allocations']} allocations, {p['frees']} frees, "
          f"{p['failed_allocations']} failed, {p['unknown_frees']} unknown frees; "
          f"peak by kind {p['peak_bytes']}; left at exit by function {dict(events)}")
    left = sum(g["bytes"] for g in p["leaks"] if g["kind"] in ("device", "vmm"))
    verdict(f"peak of {kind} (torch: max_memory_reserved)", p["peak_bytes"][kind],
            torch["max_reserved"])
    verdict("device + vmm left at exit (torch: memory_reserved)", left,
            torch["reserved_at_exit"])
    print("  ALLOCATIONS", "OK" if p["allocations"] else "MISMATCH (0 allocations)")

truth = lines("vmm-sample")
p = process("vmm-sample", "memory_vmm")
if p is None:
    print("  vmm-sample: no result (see vmm-sample.txt)")
else:
    failed = [t for t in truth if "call" in t and t["ret"] != 0]
    print("  calls that failed (the 1 PiB cuMemCreate should be the only one):", failed)
    want = sorted((t["leak"], t["ptr"], t["size"], t["outstanding"]) for t in truth
                  if "leak" in t)
    got = sorted((g["kind"], a["ptr"], a["size"], g["outstanding"] or "")
                 for g in p["leaks"] if g["ended_by"] == "process exit" for a in g["allocations"])
    print("  left (program):  ", want)
    print("  left (cudaprobe):", got)
    print("  LEAKS", "OK" if want == got else "MISMATCH")
    keys = ("allocations", "frees", "failed_allocations", "failed_frees", "unknown_frees",
            "failed_maps", "unknown_maps")
    counts = [p[k] for k in keys]
    print("  counts:", dict(zip(keys, counts)), "nested:", p["nested_driver_calls"],
          "(expected 10, 6, 1, 0, 0, 0, 0; nested 4 where the runtime calls libcuda's "
          "exported pool and registration functions)")
    print("  COUNTS", "OK" if counts == [10, 6, 1, 0, 0, 0, 0] else "MISMATCH")
    print("  peak by kind:", p["peak_bytes"], "(vmm 10 MiB expected)")
PY
cat "$OUT/vmm-summary.txt"
# the reports in one file: the device tool brings back only a few files
(cd "$OUT" && tar czf vmm-traces.tar.gz vmm-*.json && rm -f vmm-*.json)
