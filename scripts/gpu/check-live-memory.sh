#!/usr/bin/env bash
# Live device memory as serve counts it (cudaprobe_memory_live_bytes) against
# what the job's PyTorch caching allocator holds from CUDA
# (torch.cuda.memory_reserved(), printed by benchmarks/torch_workloads.py), the
# job held after its measured part so that both are read at the same point:
# serve as the DaemonSet runs it (--api driver), then the same with --gpu-time
# (the GPU-time library's CUPTI in the job). Summary: $OUT/live-memory.txt.
# Run from the repo root, .gpukit and .whl carried:  bash scripts/gpu/check-live-memory.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
serve_kit
txt=$OUT/live-memory.txt; : > "$txt"
{ date -u; nvidia-smi -L; echo "libcuda $LIBCUDA"; } >> "$txt" 2>&1
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
live() { python3 - 2>&1 <<'PY'
import urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen("http://127.0.0.1:9471/metrics", timeout=10).read().decode()
out = []
for f in text_string_to_metric_families(text):
    if f.name == "cudaprobe_memory_live_bytes":
        out += [f"live {s.labels.get('process')} {s.labels.get('kind')} {int(s.value)}"
                for s in f.samples if s.value]
    if f.name == "cudaprobe_calls":
        out += [f"{s.labels['function']} {s.labels.get('process')} {int(s.value)}"
                for s in f.samples if s.name == "cudaprobe_calls_total"
                and s.labels["function"] in ("cuMemAlloc_v2", "cuMemFree_v2", "cuMemCreate",
                                             "cuMemAllocAsync", "cuMemAllocManaged")]
print("; ".join(out) or "nothing")
PY
}
for mode in plain gputime; do
  extra=(); [ $mode = gputime ] && extra=(--gpu-time)
  python3 -m cudaprobe serve --prometheus 127.0.0.1:9471 --api driver --lib "$LIBCUDA" \
    "${extra[@]}" 2> /tmp/live-serve.err &
  S=$!
  until grep -q "serving Prometheus" /tmp/live-serve.err; do sleep 0.2; done
  rm -f /tmp/live.done /tmp/live.quit
  $TORCH_PY benchmarks/torch_workloads.py ${WORKLOAD:-mlp} --seconds 10 --warmup 20 \
    --done /tmp/live.done --quit /tmp/live.quit > /tmp/live-job.json &
  J=$!
  while [ ! -e /tmp/live.done ]; do sleep 0.2; done
  sleep 3   # the calls of the measured part counted
  echo "$mode: serve's live device bytes: $(live | tr '\n' ' '); the job: $(tail -1 /tmp/live-job.json)" | tee -a "$txt"
  touch /tmp/live.quit; wait $J
  kill -INT $S; wait $S
  grep -i "gpu-time\|GPU time" /tmp/live-serve.err | head -3 >> "$txt"
done
cat "$txt"
