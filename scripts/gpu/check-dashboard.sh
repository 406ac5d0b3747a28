#!/usr/bin/env bash
# The fleet dashboard fed by a GPU node running two PyTorch jobs: serve as the
# DaemonSet runs it (--api driver on the host's driver, --kubelet-logs, --duty
# DUTY (2%), with a PERIOD of 10 s rather than 30 so that a one-minute job has
# slices) with the gpu-time component (--gpu-time), started first; job A (the
# MLP step, RANK=0, one allocation of 1 TiB refused: an out-of-memory error)
# in a Kubernetes pod's container cgroup, job B (a transformer step,
# SLURM_PROCID=1) in a Slurm job's cgroup; /metrics scraped in OpenMetrics every
# 5 s (scripts/gpu/scrape_series.py) until both jobs end. Real Prometheus then
# reads the scrapes on the CPU machine (scripts/gpu/dashboard_replay.py).
# Results: $OUT/dashboard.txt, $OUT/dashboard-scrapes.gz. Run from the repo root,
# .gpukit and .whl carried:  bash scripts/gpu/check-dashboard.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
serve_kit
txt=$OUT/dashboard.txt; : > "$txt"
{ date -u; nvidia-smi -L; echo "libcuda $LIBCUDA"; git log --oneline -1; } >> "$txt" 2>&1
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
UID_POD=5f3c2a10-8d4e-4b6f-9a01-23456789abcd
CID=$(printf 'c%.0s' {1..64})
cg=/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${UID_POD//-/_}.slice/cri-containerd-$CID.scope
sl=/sys/fs/cgroup/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0
mkdir -p "$cg" "$sl" /tmp/kubelet/pods/team-a_trainer-0_$UID_POD /tmp/kubelet/containers
: > /tmp/kubelet/containers/trainer-0_team-a_main-$CID.log
python3 -m cudaprobe serve --prometheus 127.0.0.1:9470 --api driver --lib "$LIBCUDA" \
  --kubelet-logs /tmp/kubelet --duty "${DUTY:-2%}" --duty-period "${PERIOD:-10}" --gpu-time \
  2> /tmp/dash-serve.err &
S=$!
until grep -q "serving Prometheus" /tmp/dash-serve.err; do sleep 0.2; done
rm -f /tmp/dash.stop
python3 scripts/gpu/scrape_series.py http://127.0.0.1:9470/metrics "$OUT/dashboard-scrapes.gz" \
  --stop /tmp/dash.stop --interval 5 &
P=$!
sh -c '{ echo $$ > "$1/cgroup.procs" || echo "job A: its cgroup not joined" >&2; }; RANK=0 WORLD_SIZE=2 exec "$2" benchmarks/torch_workloads.py mlp --seconds "$3" --warmup 20 --oom' \
  sh "$cg" "$TORCH_PY" "${SECONDS_RUN:-60}" > /tmp/dash-a.json 2>&1 &
A=$!
sh -c '{ echo $$ > "$1/cgroup.procs" || echo "job B: its cgroup not joined" >&2; }; SLURM_PROCID=1 SLURM_NTASKS=2 exec "$2" benchmarks/torch_workloads.py transformer --seconds "$3" --warmup 20' \
  sh "$sl" "$TORCH_PY" "${SECONDS_RUN:-60}" > /tmp/dash-b.json 2>&1 &
B=$!
wait $A; echo "job A (pod team-a/trainer-0, RANK=0, pid $A): exit $?, $(tail -1 /tmp/dash-a.json)" | tee -a "$txt"
wait $B; echo "job B (Slurm job 4242, SLURM_PROCID=1, pid $B): exit $?, $(tail -1 /tmp/dash-b.json)" | tee -a "$txt"
sleep 12   # the jobs' last records (GPU time flushed at exit) scraped
touch /tmp/dash.stop; wait $P
kill -INT $S; wait $S; echo "serve: exit $?" >> "$txt"
grep -v "^$" /tmp/dash-serve.err | tail -15 >> "$txt"
ls -la "$OUT" >> "$txt"
rmdir "$sl" "$(dirname "$sl")" "$(dirname "$(dirname "$sl")")" "$cg" 2>/dev/null
cat "$txt"
