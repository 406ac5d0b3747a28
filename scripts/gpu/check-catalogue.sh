#!/usr/bin/env bash
# Every CUDA function, checked against an independent count, on
# the GPU machine: the CUPTI callback counter (benchmarks/oracle/cupti_counter.c,
# loaded with CUDA_INJECTION64_PATH: every runtime and driver callback) beside
# `cudaprobe trace -e all -f jsonl`, set side by side by benchmarks/oracle/compare.py.
#
# Programs: benchmarks/api_tour.cu (graphs and capture, stream-ordered pools,
# VMM, host registration and host callbacks, profiler ranges, symbol and 3D
# copies, stream priorities, cuGetProcAddress; its own "CALL" lines say what it
# made), ROUNDS rounds of it; then the PyTorch workloads of
# benchmarks/torch_workloads.py (WORKLOADS), with and without
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (cuMemCreate/cuMemMap).
# Goal: every function CUPTI reports is traced by -e all with the same count
# (runtime exact; CUPTI's own driver calls, made by the injection library,
# counted by both, are noted where they differ).
# Results: $OUT/catalogue.txt (readable), $OUT/catalogue.jsonl (one object per
# run), $OUT/api_tour.calls (what the tour says it made), for docs/gpu-results.
# Run from the repo root, .gpukit and .whl carried: bash scripts/gpu/check-catalogue.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKLOADS=${WORKLOADS:-loop mlp}
ROUNDS=${ROUNDS:-3}
CUPTI_LIB=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda-*/ -name 'libcupti.so' 2>/dev/null | head -1)")
ORACLE=/tmp/cupti_counter.so
gcc -O2 -shared -fPIC -o $ORACLE benchmarks/oracle/cupti_counter.c -I/usr/local/cuda/include \
  -I/usr/local/cuda/extras/CUPTI/include -L"$CUPTI_LIB" -lcupti -Wl,-rpath,"$CUPTI_LIB" || exit 1
# the shared runtime, so that its calls go through libcudart's exported symbols
/usr/local/cuda/bin/nvcc -O1 -cudart=shared -o /tmp/api_tour benchmarks/api_tour.cu -lcuda || exit 1
W="$TORCH_PY benchmarks/torch_workloads.py"
txt=$OUT/catalogue.txt; jl=$OUT/catalogue.jsonl; : > "$txt"; : > "$jl"
args_of() { case $1 in loop) echo "--seconds 3";; mlp) echo "--iters 300";;
                       gemm) echo "--iters 100";; compile) echo "--iters 300";; esac; }
record() {  # $1 label, $2 counts file, $3 trace
  echo "== $1" >> "$txt"
  python3 benchmarks/oracle/compare.py "$2" "$3" --json /tmp/cmp.json >> "$txt" 2>&1
  python3 -c 'import json,sys; d=json.load(open("/tmp/cmp.json")); d["run"]=sys.argv[1];
print(json.dumps(d))' "$1" >> "$jl"
}

# the tour: how many functions and symbols -e all probes here, then the run
cudaprobe list 2>/dev/null | tail -1 >> "$txt"
CUDA_INJECTION64_PATH=$ORACLE CUPTI_COUNTER_OUT=/tmp/tour.cupti \
  cudaprobe trace -e all -f jsonl -o /tmp/tour.jsonl --force -- /tmp/api_tour "$ROUNDS" \
  > "$OUT/api_tour.calls" 2>/tmp/tour.err
tail -2 /tmp/tour.err >> "$txt"
record "api_tour x$ROUNDS" /tmp/tour.cupti /tmp/tour.jsonl
# the tour's own account: each call it made, against the trace's rows
python3 - "$OUT/api_tour.calls" /tmp/tour.jsonl >> "$txt" <<'PY'
import collections, json, re, sys
made = collections.Counter(l.split()[2] for l in open(sys.argv[1]) if l.startswith("CALL "))
rows = [json.loads(l) for l in open(sys.argv[2])][:-1]
seen = collections.Counter(re.sub(r"(_v\d+)?(_ptsz|_ptds)?$", "", r["event"]) for r in rows)
bad = {n: (k, seen[n]) for n, k in made.items() if seen[n] < k}
print(f"tour: {len(made)} functions, {sum(made.values())} calls made; "
      f"traced fewer times: {bad or 'none'}")
PY

for w in $WORKLOADS; do
  a=$(args_of "$w")
  for alloc in default expandable; do
    conf=""; [ $alloc = expandable ] && conf="expandable_segments:True"
    PYTORCH_CUDA_ALLOC_CONF=$conf CUDA_INJECTION64_PATH=$ORACLE \
      CUPTI_COUNTER_OUT=/tmp/$w-$alloc.cupti \
      cudaprobe trace -e all -f jsonl -o /tmp/$w-$alloc.jsonl --force -- $W "$w" $a \
      2>/tmp/$w-$alloc.err > /dev/null
    tail -2 /tmp/$w-$alloc.err >> "$txt"
    record "$w $alloc -e all" /tmp/$w-$alloc.cupti /tmp/$w-$alloc.jsonl
  done
done
cat "$txt"
