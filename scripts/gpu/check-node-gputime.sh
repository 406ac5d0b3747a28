#!/usr/bin/env bash
# serve --gpu-time as the node daemon (no target): the GPU-time library put
# into every CUDA process it finds, against each program's own measure.
#   A  event_kernels (0.1 ms kernels in batches timed by CUDA events) started
#      before serve, injected while it runs: the kernels serve timed, and their
#      mean GPU time against the program's CUDA-event mean;
#   B  the same, started after serve, once A is done (the histogram has no pid:
#      each run is read as the difference of two settled scrapes);
#   T  attach_workload.py (PyTorch eager MLP + cuBLAS GEMMs, epoch after epoch)
#      running before serve: every epoch's output the same (losses bit-identical)
#      before, during and after the injection, exit 0;
#   P0 attach_workload.py --profile started after serve: the library gets CUPTI
#      first, and torch.profiler, started later in the process, records nothing
#      (the conflict an opt-out is for);
#   P  the same with CUDAPROBE_NO_GPU_TIME=1 in its environment: refused, counted
#      (reason "opted_out"), its profiler's CUDA events all there.
# Summary: $OUT/node-gputime.txt. Run from the repo root, .gpukit and .whl carried:
#   bash scripts/gpu/check-node-gputime.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
serve_kit
d=/tmp/nodegpu; rm -rf "$d"; mkdir -p "$d"
nvcc -O2 -cudart shared -o "$d/event_kernels" scripts/gpu/event_kernels.cu || exit 1
TORCH_CUDART=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcudart.so.* | head -1)
KIT_CUDART=$(ldd "$d/event_kernels" | awk '/libcudart/{print $3}')
txt=$OUT/node-gputime.txt; : > "$txt"
say() { echo "$*" | tee -a "$txt"; }
{ date -u; nvidia-smi -L; git log --oneline -1; } >> "$txt" 2>&1
W=("$TORCH_PY" benchmarks/attach_workload.py)
PORT=9466
scrape() { python3 -c "import urllib.request as u, sys
sys.stdout.write(u.urlopen('http://127.0.0.1:$PORT/metrics', timeout=10).read().decode())"; }
spin() {  # the spin kernel's histogram count and sum (seconds), once two scrapes 1 s apart agree
  local prev="" cur
  for _ in $(seq 30); do
    cur=$(scrape | awk '/^cudaprobe_gpu_kernel_duration_seconds_(count|sum)\{kernel="spin/{print $NF}' \
      | tr '\n' ' ')
    [ -n "$cur" ] && [ "$cur" = "$prev" ] && break
    prev=$cur; sleep 1
  done
  echo "${cur:-0 0}"
}
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache

"${W[@]}" --seconds 25 --log "$d/T-epochs.jsonl" > "$d/T.out" 2>&1 &
T=$!
"$d/event_kernels" 60000 200000 > "$d/A.out" 2>&1 &
A=$!
sleep 2
python3 -m cudaprobe serve --prometheus 127.0.0.1:$PORT --lib "$TORCH_CUDART" --lib "$KIT_CUDART" \
  --lib "$LIBCUDA" --gpu-time -d 300 2> "$d/serve.err" &
S=$!
until grep -q "serving Prometheus" "$d/serve.err"; do sleep 0.2; kill -0 $S || exit 1; done
say "serve up; A pid $A and T pid $T started before it"
wait $A; say "A exit $?: $(cat "$d/A.out")"
read -r a_count a_sum <<< "$(spin)"
"$d/event_kernels" 30000 200000 > "$d/B.out" 2>&1 &
B=$!
say "B pid $B started after serve"
wait $B; say "B exit $?: $(cat "$d/B.out")"
read -r b_count b_sum <<< "$(spin)"
for run in P0 P; do
  rm -f /tmp/node-prof.stop
  if [ $run = P ]; then export CUDAPROBE_NO_GPU_TIME=1; fi
  "${W[@]}" --seconds 60 --stop /tmp/node-prof.stop --profile --log "$d/$run-epochs.jsonl" \
    > "$d/$run.out" 2>&1 &
  P=$!
  unset CUDAPROBE_NO_GPU_TIME
  say "$run pid $P (torch.profiler) started after serve"
  for _ in $(seq 300); do  # until serve has put the library in, or said why not
    grep -q "pid $P\b" "$d/serve.err" && break
    kill -0 $P 2>/dev/null || break
    sleep 0.2
  done
  for _ in $(seq 600); do  # then three epochs under the profiler
    [ "$(cat "$d/$run-epochs.jsonl" 2>/dev/null | wc -l)" -ge 3 ] && break
    kill -0 $P 2>/dev/null || break
    sleep 0.2
  done
  touch /tmp/node-prof.stop
  wait $P; say "$run exit $?: $(tail -1 "$d/$run.out")"
done
wait $T; say "T exit $?: $(tail -c 300 "$d/T.out")"
sleep 2
scrape > "$d/metrics.txt"
grep -E '^cudaprobe_gpu_time_(processes|refusals)' "$d/metrics.txt" | tee -a "$txt"
kill -INT $S; wait $S; say "serve exit $?"
grep -E "GPU time|GPU-time|gpu-time" "$d/serve.err" | tee -a "$txt"
python3 - "$d" "$a_count" "$a_sum" "$b_count" "$b_sum" "$T" <<'PY' | tee -a "$txt"
import json, re, sys
d, a_count, a_sum, b_count, b_sum, tpid = sys.argv[1], *map(float, sys.argv[2:6]), sys.argv[6]
runs = {"A (before serve)": (a_count, a_sum), "B (after serve)": (b_count - a_count, b_sum - a_sum)}
for (name, (count, total)), f in zip(runs.items(), ("A.out", "B.out")):
    n, ms = re.search(r"kernels (\d+) event_ms ([\d.]+)", open(f"{d}/{f}").read()).groups()
    n, ms = int(n), float(ms)
    mean_ev = ms / n * 1e3  # us a kernel, by CUDA events
    mean_cp = total / count * 1e6 if count else 0.0
    print(f"{name}: launched {n}, serve timed {int(count)} ({count / n:.1%}); mean kernel "
          f"{mean_cp:.2f} us (serve) against {mean_ev:.2f} us (CUDA events): "
          f"{(mean_cp - mean_ev) / mean_ev:+.2%}")
for name in ("T", "P0", "P"):
    epochs = [json.loads(x) for x in open(f"{d}/{name}-epochs.jsonl")]
    outs = {e["out"] for e in epochs}
    print(f"{name}: {len(epochs)} epochs, {len(outs)} distinct outputs (loss, GEMM checksum)")
err = open(f"{d}/serve.err").read()
print(f"T recording: {'recording in pid ' + tpid in err}")
PY
