#!/usr/bin/env bash
# What serve costs a launch-bound PyTorch job, exact and duty-cycled: the MLP
# step of benchmarks/torch_workloads.py (about 2-3 ms) run for SECONDS (20)
# untraced, beside `serve --api driver --lib LIBCUDA` (the DaemonSet's), and
# beside the same with --duty 2% and --duty 10% (--duty-period 5), in turn,
# ROUNDS (3) rounds; the workload's own ms a step, and for each serve the
# launches it counted (scaled) against the CUPTI callback counter's in the
# workload. Summary: $OUT/duty.txt. Run from the repo root, .gpukit and .whl
# carried:  bash scripts/gpu/check-duty.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build_oracle || exit 1
serve_kit
SECONDS_RUN=${SECONDS_RUN:-20}
txt=$OUT/duty.txt; : > "$txt"
{ date -u; nvidia-smi -L; echo "libcuda $LIBCUDA"; } >> "$txt" 2>&1
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
launches() { python3 - <<'PY'
import urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=10).read().decode()
n = 0.0
for f in text_string_to_metric_families(text):
    if f.name == "cudaprobe_calls":
        n += sum(s.value for s in f.samples if s.name == "cudaprobe_calls_total"
                 and s.labels["function"] in ("cuLaunchKernel", "cuLaunchKernelEx"))
print(n)
PY
}
run() {  # run NAME [serve options...]
  local name=$1 S="" out
  shift
  if [ "$name" != untraced ]; then
    python3 -m cudaprobe serve --prometheus 127.0.0.1:9464 --api driver --lib "$LIBCUDA" "$@" \
      2> /tmp/duty-serve.err &
    S=$!
    until grep -q "serving Prometheus" /tmp/duty-serve.err; do sleep 0.2; done
  fi
  rm -f /tmp/duty.cupti
  out=$(CUDA_INJECTION64_PATH=$ORACLE CUPTI_COUNTER_OUT=/tmp/duty.cupti $TORCH_PY \
        benchmarks/torch_workloads.py mlp --seconds "$SECONDS_RUN" --warmup 3 | tail -1)
  local cupti
  cupti=$(awk '/^# exit/{e=1} e && ($2=="cuLaunchKernel" || $2=="cuLaunchKernelEx"){n+=$3} END{print n+0}' /tmp/duty.cupti)
  if [ -n "$S" ]; then
    sleep 2
    local counted; counted=$(launches)
    kill -INT $S; wait $S
    echo "$name: $out; launches counted $counted, CUPTI $cupti ($(python3 -c "print(f'{$counted / max($cupti, 1):.3f}')")x); $(grep -o '[0-9]* lost' /tmp/duty-serve.err | tail -1)" | tee -a "$txt"
  else
    echo "$name: $out; CUPTI launches $cupti" | tee -a "$txt"
  fi
}
for round in $(seq ${ROUNDS:-3}); do
  echo "== round $round" | tee -a "$txt"
  run untraced
  run exact
  run duty2 --duty 2% --duty-period 5
  run duty10 --duty 10% --duty-period 5
done
cat "$txt"
