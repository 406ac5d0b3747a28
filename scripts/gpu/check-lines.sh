#!/usr/bin/env bash
# serve --gpu-time --py-stacks on a PyTorch training step, each line's GPU
# seconds against the workload's own CUDA events (scripts/gpu/lines_check.py):
# launched under serve with every call traced, then on the node beside the
# running job with --duty (DUTY, 2%; PERIOD, 5 s); then what the slices cost
# the MLP and transformer jobs with --gpu-time --py-stacks on
# (scripts/gpu/slice_cost.py; PARTS="launched node cost" picks; SECONDS_RUN,
# NODE_SECONDS: how long; COST_ARGS: serve's options in the cost part; DEBUG:
# the node's clock alignment printed;
# WORK_ONLY: the node's serve without --py-stacks, kernels by name alone).
# Summary: $OUT/lines.txt. Run from the repo root, .gpukit and .whl carried.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
serve_kit
txt=$OUT/lines.txt; : > "$txt"
{ date -u; nvidia-smi -L; echo "libcuda $LIBCUDA"; git log --oneline -1; nproc; } >> "$txt" 2>&1
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
# the workload's native frames, should it die (scripts/gpu/abort_bt.c)
gcc -shared -fPIC -O2 -o /tmp/abort_bt.so scripts/gpu/abort_bt.c && export ABORT_BT=/tmp/abort_bt.so
for part in ${PARTS:-launched node cost}; do
  echo "== $part $(date -u +%T)" | tee -a "$txt"
  case $part in
    launched) timeout 200 python3 scripts/gpu/lines_check.py launched --out "$txt" \
                --seconds "${SECONDS_RUN:-30}" ;;
    node) timeout 250 python3 scripts/gpu/lines_check.py node --out "$txt" --lib "$LIBCUDA" \
            --seconds "${NODE_SECONDS:-${SECONDS_RUN:-30}}" --duty "${DUTY:-2%}" --duty-period "${PERIOD:-5}" ${DEBUG:+--debug} ${WORK_ONLY:+--work-only} ;;
    cost) serve_args=(); for arg in ${COST_ARGS:---gpu-time --py-stacks}; do
            serve_args+=("--serve-arg=$arg"); done
          for w in ${WORKLOADS:-mlp transformer}; do
            echo "-- $w, serve ${COST_ARGS:---gpu-time --py-stacks}" | tee -a "$txt"
            timeout 300 python3 scripts/gpu/slice_cost.py --lib "$LIBCUDA" --out "$txt" \
              --workload "$w" --seconds "${COST_SECONDS:-60}" --duty "${DUTY:-2%}" \
              --duty-period "${PERIOD:-5}" "${serve_args[@]}"
          done ;;
  esac
done
