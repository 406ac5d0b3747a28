#!/usr/bin/env bash
# --gpu-time on the GPU machine, each step guarded
# so that one failure does not lose the rest; under 8 minutes (BUDGET_S bounds the
# cost rounds: a round that would end past it is not started).
#  1. accuracy: kernels' GPU durations from `cudaprobe trace --gpu-time` against
#     CUDA events around the same kernels (benchmarks/gputime_compare.py regions,
#     5% tolerance): a multi-stream program (benchmarks/multistream.cu), PyTorch
#     eager ops and cuBLAS GEMMs (benchmarks/gputime_torch.py); the multi-stream
#     trace in Chrome form too, checked (device/stream tracks, launch flows).
#  0. the library alone in multistream.cu: which calls CUPTI made API records of
#     (only launches, copies and memsets, or every call) and each kernel's API record.
#  2. outputs: `stats --gpu-time` (table and --json) on the MLP step and the
#     GEMMs (one process), the table's GPU TIME column, `serve --gpu-time` scraped.
#  3. clock: 60 s of multistream.cu drift, marker kernels against CLOCK_MONOTONIC
#     host windows (gputime_compare.py drift).
#  4. cost: the launch-bound MLP step and the GPU-bound GEMMs
#     (benchmarks/torch_workloads.py, both in one process: a run's start-up, ~10 s
#     untraced and more under nsys, is paid once), ms per iteration untraced, `trace`,
#     `trace --gpu-time`, and `nsys profile -t cuda`, ROUNDS rounds alternating
#     (`trace` without --gpu-time in the first round only; each run's wall seconds
#     in cost.jsonl and gputime.txt);
#     the last nsys report's cuda_gpu_kern_sum beside `stats --gpu-time` of the same work.
#  and, for the --pid research, gdb loading the library into a running PyTorch loop
#     (where the machine has gdb: the H100 of 2026-11-24 had none).
# Results under $OUT, 7 files (the device tool brings back about 8): gputime.txt
# (readable, every step's status), the four *-compare.json, cost.jsonl, and
# gputime-files.tar.gz: everything else (traces, stats, nsys CSV, stderr).
# Run from the repo root, .gpukit and .whl carried:
#   bash scripts/gpu/check-gputime.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS=${ROUNDS:-3}
DRIFT_S=${DRIFT_S:-60}
BUDGET_S=${BUDGET_S:-420}  # no cost round is started that would end past this
NSYS=$(find_nsys)
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
W=("$TORCH_PY" benchmarks/torch_workloads.py)
G=("$TORCH_PY" benchmarks/gputime_torch.py)
txt=$OUT/gputime.txt; : > "$txt"
say() { echo "$*" >> "$txt"; }
step() {  # step NAME SECONDS COMMAND...: run it under a timeout, say how it ended
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  timeout -k 10 "$limit" "$@"
  rc=$?
  say "step $name: exit $rc in $((SECONDS - start)) s"
  return $rc
}

# -- the machine, the library
# shellcheck disable=SC2129  # each step appends as it ends: a later failure loses nothing
{
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$NVCC" --version | tail -1
  echo "libcupti: $(find /usr/local/cuda/ /usr/local/cuda-*/ -name 'libcupti.so*' 2>/dev/null | head -3 | tr '\n' ' ')"
  echo "nsys: ${NSYS:-not found}"
  "$TORCH_PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  "$TORCH_PY" -c 'import glob, os, torch; print("torch libcupti:", glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "*", "lib", "libcupti*")))'

  git log --oneline -1 2>/dev/null
} >> "$txt" 2>&1
step build-library 120 python3 -m cudaprobe.targets.cupti >> "$txt" 2>&1
step build-multistream 120 "$NVCC" -O2 -cudart=shared -o build/multistream \
  benchmarks/multistream.cu >> "$txt" 2>&1

# -- the library alone in a program (no cudaprobe): which calls CUPTI made API records of
# (the header's api_records: 1 launches/copies/memsets only, through
# cuptiActivityEnable{Runtime,Driver}Api; 2 every call) and whether each kernel has its API
# record (the join's key)
lib_dir=$(mktemp -d)
read -r lib cupti_so < <(python3 -c "from cudaprobe.targets.cupti import library_path as l, \
find_libcupti as f; print(l()[0], f())")
CUDA_INJECTION64_PATH=$lib CUDAPROBE_GPUTIME_DIR=$lib_dir CUDAPROBE_CUPTI=$cupti_so \
  timeout 60 build/multistream streams 2 3 200 > /dev/null 2>&1
say "library alone: multistream exit $?"
python3 - "$lib_dir" >> "$txt" 2>&1 <<'PY'
import struct, sys
from pathlib import Path
from cudaprobe.decode import gputime
r = gputime.GpuReader(Path(sys.argv[1]))
r.poll()
for f in r._files.values():
    mode = struct.unpack_from("<I", f.path.read_bytes(), gputime.HEADER_OFFSETS["api_records"])[0]
    print("library alone: pid", f.pid, "api_records", mode, "(1 selected, 2 all)",
          "API functions recorded", sorted(set(f.functions.values())))
kernels = [w for w in r.work if w.kind == "kernel"]
print("library alone: kernels", len(kernels), "with their API record",
      sum(w.api is not None for w in kernels), "statuses", r.statuses, "dropped", r.dropped)
PY
rm -rf "$lib_dir"

# -- 1. accuracy against CUDA events
regions() {  # regions NAME MARKERS COMMAND...: trace it with --gpu-time, compare with its
  # event times; MARKERS: what bounds a region in the trace (gputime_compare.py --markers)
  local name=$1 markers=$2
  shift 2
  step "trace-$name" 180 python3 -m cudaprobe trace --gpu-time -f jsonl -o "$OUT/$name.jsonl" \
    --force -- "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
  grep -h "gpu-time\|GPU time\|lost" "$OUT/$name.err" >> "$txt"
  say "== $name: GPU time against CUDA events"
  python3 benchmarks/gputime_compare.py regions "$OUT/$name.jsonl" "$OUT/$name.out" \
    --markers "$markers" --json "$OUT/$name-compare.json" >> "$txt" 2>&1
  say "compare $name: exit $?"
}
regions multistream events build/multistream streams 4 25 500
# PyTorch's regions begin at torch.cuda._sleep's kernel: 2.11 records its events with a
# function other than cudaEventRecord (cudaEventRecordWithFlags, not in the catalogue yet)
regions torch-eager sleep "${G[@]}" eager --iters 20
regions torch-gemm sleep "${G[@]}" gemm --iters 10

step chrome-multistream 120 python3 -m cudaprobe trace --gpu-time -f chrome \
  -o "$OUT/multistream.chrome.json" --force -- build/multistream streams 4 5 500 \
  > /dev/null 2>> "$txt"
python3 tests/chrome_check.py "$OUT/multistream.chrome.json" \
  > "$OUT/multistream-chrome-check.txt" 2>&1
say "chrome check: exit $?"; head -12 "$OUT/multistream-chrome-check.txt" >> "$txt"

# -- 2. the other outputs
step table-multistream 120 python3 -m cudaprobe trace --gpu-time -e kernel \
  -- build/multistream streams 2 3 200 > "$OUT/multistream-table.txt" 2>&1
head -8 "$OUT/multistream-table.txt" >> "$txt"
# the MLP step and the GEMMs in one process, as the cost runs below give them to nsys
step stats 180 python3 -m cudaprobe stats --gpu-time --json -o "$OUT/stats.json" --force \
  -- "${W[@]}" mlp gemm --iters 300 --iters-next 50 > "$OUT/stats.txt" 2>&1
python3 - "$OUT/stats.json" >> "$txt" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1])).get("gpu") or {}
print(sys.argv[1], "kernels", len(d.get("kernels", [])), "kernel GPU time ms",
      round(d.get("kernel_total_ns", 0) / 1e6, 3), "dropped", d.get("dropped"))
for k in d.get("kernels", [])[:8]:
    print("  %8d x %10.1f us avg  p99 %10.1f us  %s" % (k["calls"], k["avg_ns"] / 1e3,
                                                      k["p99_ns"] / 1e3, k["name"][:90]))
for c in d.get("copies", []):
    print("  %8d x %s %d bytes %s GB/s" % (c["calls"], c["name"], c["bytes"], c["bandwidth_gbps"]))
PY
python3 -c 'import prometheus_client' 2>/dev/null || python3 -m pip install -q --no-index \
  --no-deps --target /tmp/site .whl/prometheus_client-*.whl >> "$txt" 2>&1
port=$((20000 + RANDOM % 20000))
python3 -m cudaprobe serve --prometheus "127.0.0.1:$port" --gpu-time -e kernel \
  -- "${W[@]}" mlp --seconds 12 > /dev/null 2> "$OUT/serve.err" &
spid=$!
: > "$OUT/serve-gpu-metrics.txt"
while kill -0 $spid 2>/dev/null; do  # the last scrape that had GPU time, while it runs
  sleep 2
  python3 -c "import urllib.request as u, sys
sys.stdout.write(u.urlopen('http://127.0.0.1:$port/metrics', timeout=5).read().decode())" \
    > /tmp/scrape.txt 2>/dev/null
  grep -q '^cudaprobe_gpu_kernel_duration_seconds_count' /tmp/scrape.txt \
    && grep '^cudaprobe_gpu_kernel_duration_seconds_\(count\|sum\)' /tmp/scrape.txt \
      > "$OUT/serve-gpu-metrics.txt"
done
wait $spid
say "serve: exit $?, $(grep -c _count "$OUT/serve-gpu-metrics.txt") GPU-time series scraped"
head -6 "$OUT/serve-gpu-metrics.txt" >> "$txt"

# -- 3. the clock over a minute
step drift $((DRIFT_S + 90)) python3 -m cudaprobe trace --gpu-time -e kernel,sync -f jsonl \
  -o "$OUT/drift.jsonl" --force -- build/multistream drift "$DRIFT_S" \
  > "$OUT/drift.out" 2> "$OUT/drift.err"
grep -h "gpu-time\|lost" "$OUT/drift.err" >> "$txt"
say "== drift over $DRIFT_S s"
python3 benchmarks/gputime_compare.py drift "$OUT/drift.jsonl" "$OUT/drift.out" \
  --json "$OUT/drift-compare.json" >> "$txt" 2>&1
say "compare drift: exit $?"
rm -f "$OUT/drift.jsonl"  # large; the comparison is kept

# -- research for --pid (docs/gputime.md): the library loaded with gdb into a PyTorch
# process already running (after its warm-up) and recording from then on: does the
# process survive and finish, and are its kernels timed from the attach on?
if command -v gdb > /dev/null; then
  att=$(mktemp -d); rm -f /tmp/att.ready /tmp/att.go /tmp/att.done /tmp/att.quit
  "${W[@]}" loop --seconds 3 --ready /tmp/att.ready --go /tmp/att.go --done /tmp/att.done \
    --quit /tmp/att.quit > "$OUT/attach.out" 2>&1 &
  apid=$!
  for _ in $(seq 600); do [ -e /tmp/att.ready ] || ! kill -0 $apid 2>/dev/null && break; sleep 0.2; done
  timeout -k 5 60 gdb -p $apid -batch -nx -ex "call (void*)dlopen(\"$lib\", 2)" \
    -ex "call (int)gputime_attach(\"$att\", \"$cupti_so\")" > "$OUT/attach-gdb.txt" 2>&1
  say "attach: gdb exit $?: $(grep '^\$' "$OUT/attach-gdb.txt" | tr '\n' ' ')"
  touch /tmp/att.go
  for _ in $(seq 300); do [ -e /tmp/att.done ] || ! kill -0 $apid 2>/dev/null && break; sleep 0.2; done
  touch /tmp/att.quit
  wait $apid; say "attach: the workload exited $?: $(grep -m1 '^{' "$OUT/attach.out")"
  python3 - "$att" >> "$txt" 2>&1 <<'PY'
import sys
from pathlib import Path
from cudaprobe.decode.gputime import GpuReader
r = GpuReader(Path(sys.argv[1]))
r.poll()
kernels = [w for w in r.work if w.kind == "kernel"]
print("attach: kernels recorded after the attach", len(kernels), "statuses", r.statuses,
      "dropped", r.dropped, "joinable API records", sum(w.api is not None for w in kernels))
PY
  rm -rf "$att"
else
  say "attach: no gdb on this machine, not tried"
fi

# -- 4. cost beside Nsight Systems, rounds alternating; `trace` alone (no --gpu-time)
# in the first round only, for the share of the cost that is CUPTI's
cost=$OUT/cost.jsonl; : > "$cost"
measure() {  # measure VARIANT ROUND: one process runs both workloads (its start-up, CUDA's and
  # the tracer's paid once); their JSON lines labelled, with the run's wall seconds
  local v=$1 r=$2 start=$SECONDS lines
  local args=(mlp gemm --iters 300 --iters-next 50)
  case $v in
    untraced) lines=$(timeout 180 "${W[@]}" "${args[@]}" 2>/dev/null) ;;
    trace) lines=$(timeout 180 python3 -m cudaprobe trace -f jsonl -o /tmp/c.jsonl --force \
                     -- "${W[@]}" "${args[@]}" 2>/dev/null) ;;
    gputime) lines=$(timeout 180 python3 -m cudaprobe trace --gpu-time -f jsonl -o /tmp/c.jsonl \
                       --force -- "${W[@]}" "${args[@]}" 2>/dev/null) ;;
    nsys) [ -n "$NSYS" ] || return
          lines=$(timeout 240 "$NSYS" profile -t cuda -o /tmp/nsys-cost --force-overwrite true \
                    "${W[@]}" "${args[@]}" 2>/dev/null) ;;
  esac
  for w in mlp gemm; do
    line=$(grep -m1 "^{\"workload\": \"$w\"" <<< "$lines")
    echo "{\"workload\": \"$w\", \"round\": $r, \"variant\": \"$v\", \"wall_s\": \
$((SECONDS - start)), \"result\": ${line:-null}}" >> "$cost"
  done
}
next_round_s=0  # what the last round's untraced, gputime and nsys runs took
for r in $(seq "$ROUNDS"); do
  if [ $((SECONDS + next_round_s)) -gt "$BUDGET_S" ]; then
    say "cost: round $r not started (${SECONDS} s gone, a round takes ${next_round_s} s)"
    break
  fi
  next_round_s=0
  variants="untraced gputime nsys"
  [ "$r" = 1 ] && variants="untraced trace gputime nsys"
  for v in $variants; do
    start=$SECONDS
    measure "$v" "$r"
    say "cost: round $r $v: $((SECONDS - start)) s"
    [ "$v" = trace ] || next_round_s=$((next_round_s + SECONDS - start))
  done
done
cat "$cost" >> "$txt"
python3 - "$cost" >> "$txt" 2>&1 <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    if r["result"]:
        by.setdefault((r["result"]["workload"], r["variant"]), []).append(r["result"]["ms_per_iter"])
for w in sorted({k[0] for k in by}):  # medians, and each beside the untraced one
    base = statistics.median(by.get((w, "untraced"), [float("nan")]))
    for v in ("untraced", "trace", "gputime", "nsys"):
        if (w, v) in by:
            m = statistics.median(by[(w, v)])
            print("cost %-5s %-8s median %8.4f ms/iter  x%.3f  (%s)" % (w, v, m, m / base, by[(w, v)]))
PY
if [ -n "$NSYS" ] && [ -e /tmp/nsys-cost.nsys-rep ]; then  # the last round's, beside `stats`
  step nsys-stats 120 "$NSYS" stats -r cuda_gpu_kern_sum --format csv -o "$OUT/nsys-cost" \
    /tmp/nsys-cost.nsys-rep > /dev/null 2>&1
  head -9 "$OUT"/nsys-cost*cuda_gpu_kern_sum*.csv >> "$txt" 2>/dev/null
fi
say "done in $SECONDS s"
pack_out gputime-files.tar.gz gputime.txt cost.jsonl multistream-compare.json \
  torch-eager-compare.json torch-gemm-compare.json drift-compare.json
cat "$txt"
