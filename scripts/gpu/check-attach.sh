#!/usr/bin/env bash
# GPU check for `cudaprobe trace --pid`: attach, with no --lib, to a PyTorch
# training loop that is already running, for 5 s; then to a Python process
# that imports torch only after cudaprobe attached (--wait). Run on the device
# machine from the repo root with .gpukit and .whl carried:
#   bash scripts/gpu/check-attach.sh
# Writes under $OUT (7 files): attach-env.txt, attach-train.txt (the loop's
# log), attach-maps.txt (CUDA files the loop maps, from /proc/PID/maps),
# attach-stderr.txt (cudaprobe's), attach.jsonl, attach-late.txt, and
# attach-summary.txt, the human summary.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
{ nvidia-smi -L; uname -r; "$TORCH_PY" -c 'import torch; print("torch", torch.__version__,
  "cuda", torch.version.cuda)'; } > "$OUT/attach-env.txt" 2>&1

# A small MLP trained for ~20 s. Each step copies a batch host-to-device like a
# data loader; every 25 steps a scratch buffer of a new size is allocated and
# the cache emptied, so cudaMalloc/cudaFree happen while cudaprobe is attached.
cat > /tmp/train.py <<'PY'
import time
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(),
                            torch.nn.Linear(2048, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batch = torch.randn(256, 1024).pin_memory()
labels = torch.randint(0, 10, (256,))
print("ready", flush=True)
step, end = 0, time.time() + 20
while time.time() < end:
    x, y = batch.to("cuda", non_blocking=True), labels.to("cuda", non_blocking=True)
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    if step % 25 == 0:
        scratch = torch.empty((step + 1) * 4096, dtype=torch.uint8, device="cuda")
        del scratch
        torch.cuda.empty_cache()
        print("step", step, "loss", round(loss.item(), 4), flush=True)
    step += 1
    time.sleep(0.005)  # keeps the trace to a few MB
print("done", step, "steps", flush=True)
PY
"$TORCH_PY" /tmp/train.py > "$OUT/attach-train.txt" 2>&1 &
train=$!
for _ in $(seq 120); do grep -q ready "$OUT/attach-train.txt" && break; sleep 0.5; done
sleep 2
grep -E 'libcuda|libcudart|libcublas|libtorch_cuda' "/proc/$train/maps" | awk '{print $6}' \
  | sort -u > "$OUT/attach-maps.txt"
timeout 60 python3 -m cudaprobe trace --pid "$train" -d 5 -o "$OUT/attach.jsonl" \
  > "$OUT/attach-stderr.txt" 2>&1
echo "exit status: $?" >> "$OUT/attach-stderr.txt"
wait "$train"

# `import torch` after cudaprobe attached: the libraries are found by the rescan
"$TORCH_PY" -c '
import sys, time
print("waiting", flush=True); sys.stdin.readline()
import torch
x = torch.ones(1 << 20, device="cuda")
for _ in range(50):
    x = x * 2 + 1
torch.cuda.synchronize()
print("late done", float(x[0]), flush=True)
' < <(sleep 8; echo go) > /tmp/late-out.txt 2>&1 &
late=$!
sleep 1
timeout 60 python3 -m cudaprobe trace --pid "$late" --wait -o /tmp/late.jsonl \
  > /tmp/late-stderr.txt 2>&1
echo "exit status: $?" >> /tmp/late-stderr.txt
wait "$late"

python3 - "$OUT" "$train" <<'PY' > "$OUT/attach-summary.txt" 2>&1
import collections, json, sys
out, pid = sys.argv[1], int(sys.argv[2])

def load(path):
    rows = [json.loads(line) for line in open(path)]
    return rows[:-1], rows[-1]["summary"]

calls, summary = load(f"{out}/attach.jsonl")
print(f"== trace --pid {pid} -d 5 (no --lib): {len(calls)} calls, "
      f"lost {summary['lost_total']}, pids seen {sorted({c['pid'] for c in calls})}")
print("   files probed:", *summary["libraries"], sep="\n     ")
print("   CUDA files the process maps:", *open(f"{out}/attach-maps.txt").read().split(),
      sep="\n     ")
print("   results:", dict(collections.Counter(c["ret_name"] for c in calls)))
print("   calls per event:", dict(collections.Counter(c["event"] for c in calls).most_common(15)))
launches = [c for c in calls if c["category"] == "kernel"]
names = {c["args"].get("func_name") or c["args"].get("func") or c["args"].get("f")
         for c in launches}
print(f"   kernel launches: {len(launches)}, of {len(names)} distinct kernels")
for c in launches[:6]:
    print(f"     {c['event']:<24} {c['ret_name']:<12} {c['duration_ns']:>8}ns  {c['details'][:140]}")
memory = [c for c in calls if c["category"] in ("memory", "transfer")]
print(f"   memory and transfer calls: {len(memory)}")
for event in sorted({c["event"] for c in memory}):
    for c in [c for c in memory if c["event"] == event][:2]:
        print(f"     {c['event']:<24} {c['ret_name']:<12} {c['duration_ns']:>8}ns  {c['details'][:140]}")
print()
late, late_summary = load("/tmp/late.jsonl")
print(f"== trace --pid --wait, then `import torch`: {len(late)} calls, "
      f"lost {late_summary['lost_total']}")
print("   files probed:", *late_summary["libraries"], sep="\n     ")
print("   calls per event:", dict(collections.Counter(c["event"] for c in late).most_common(10)))
PY
{ echo "== cudaprobe stderr"; cat /tmp/late-stderr.txt; echo "== the process"; cat /tmp/late-out.txt
  echo; cat "$OUT/attach-summary.txt" | sed -n '/import torch/,$p'; } > "$OUT/attach-late.txt"
cat "$OUT/attach-stderr.txt" "$OUT/attach-summary.txt"
