#!/usr/bin/env bash
# serve as the node daemon (no selection: every process using torch's
# libcudart and the driver), with two PyTorch jobs beside it, each in a
# cgroup made as the kubelet and slurm make them: job A in a pod
# (team-a/trainer-0, container main; RANK=0), job B in Slurm job 4242
# (SLURM_PROCID=1). Each job runs the CUPTI callback counter in its own
# process; after both exit, serve's counts per job (its labels) against
# each job's CUPTI counts, function by function.
# Summary: $OUT/jobs.txt. Run from the repo root, .gpukit and .whl carried:
#   bash scripts/gpu/check-jobs.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build_oracle || exit 1
serve_kit
TORCH_CUDART=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcudart.so.* | head -1)
txt=$OUT/jobs.txt; : > "$txt"
{ date -u; nvidia-smi -L; echo "libcuda $LIBCUDA"; echo "libcudart $TORCH_CUDART"; } >> "$txt" 2>&1
CG=/sys/fs/cgroup; [ "$(stat -f -c %T $CG)" = cgroup2fs ] || CG=/sys/fs/cgroup/unified
PODUID=1234abcd-1234-5678-9abc-def012345678
CID=$(printf 'c0%.0s' $(seq 32))
POD=$CG/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${PODUID//-/_}.slice/cri-containerd-$CID.scope
SLURM=$CG/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0
mkdir -p "$POD" "$SLURM" || exit 1
K=/tmp/kubelet; rm -rf $K; mkdir -p $K/pods/team-a_trainer-0_$PODUID $K/containers
touch $K/containers/trainer-0_team-a_main-$CID.log
echo "cgroups: $POD $SLURM" >> "$txt"
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1  # BPF cache
python3 -m cudaprobe serve --prometheus 127.0.0.1:9464 --lib "$TORCH_CUDART" --lib "$LIBCUDA" \
  --kubelet-logs $K -d 400 2> /tmp/jobs-serve.err &
S=$!
until grep -q "serving Prometheus" /tmp/jobs-serve.err; do sleep 0.2; kill -0 $S || exit 1; done
W=benchmarks/torch_workloads.py
rm -f /tmp/job?.cupti
sh -c "echo \$\$ > $POD/cgroup.procs; exec env RANK=0 CUDA_INJECTION64_PATH=$ORACLE \
  CUPTI_COUNTER_OUT=/tmp/jobA.cupti $TORCH_PY $W mlp --iters ${ITERS:-400}" > /tmp/jobA.out 2>&1 &
A=$!
sh -c "echo \$\$ > $SLURM/cgroup.procs; exec env SLURM_PROCID=1 CUDA_INJECTION64_PATH=$ORACLE \
  CUPTI_COUNTER_OUT=/tmp/jobB.cupti $TORCH_PY $W gemm --iters ${ITERS:-400}" > /tmp/jobB.out 2>&1 &
B=$!
wait $A; echo "job A exit $?: $(tail -1 /tmp/jobA.out)" | tee -a "$txt"
wait $B; echo "job B exit $?: $(tail -1 /tmp/jobB.out)" | tee -a "$txt"
scrape() { python3 -c "import urllib.request as u, sys
sys.stdout.write(u.urlopen('http://127.0.0.1:9464/metrics', timeout=10).read().decode())"; }
prev=""; for i in $(seq 40); do  # until two scrapes a second apart agree: every call counted
  sleep 1; cur=$(scrape | grep '^cudaprobe_calls_total'); [ "$cur" = "$prev" ] && break; prev=$cur
done
scrape > /tmp/jobs-metrics.txt
grep -E '^cudaprobe_(calls_total|memory_live_bytes|call_errors_total)' /tmp/jobs-metrics.txt \
  | grep -E 'k8s_pod|slurm_job' | head -60 > "$OUT/jobs-series.txt"
kill -INT $S; wait $S
tail -4 /tmp/jobs-serve.err >> "$txt"
python3 - /tmp/jobs-metrics.txt /tmp/jobA.cupti /tmp/jobB.cupti >> "$txt" <<'PY'
import collections, re, sys
sys.path.insert(0, "benchmarks/oracle")
from compare import base, read_counts
from prometheus_client.parser import text_string_to_metric_families
metrics, cupti_a, cupti_b = sys.argv[1:]
jobs = {"A (pod team-a/trainer-0, rank 0)": ({"k8s_namespace": "team-a", "k8s_pod": "trainer-0",
                                             "k8s_container": "main", "rank": "0"}, cupti_a),
        "B (slurm job 4242, rank 1)": ({"slurm_job": "4242", "rank": "1"}, cupti_b)}
samples = [s for f in text_string_to_metric_families(open(metrics).read())
           if f.name == "cudaprobe_calls" for s in f.samples if s.name == "cudaprobe_calls_total"]
series = collections.Counter(tuple(sorted((k, v) for k, v in s.labels.items()
                                          if v and k not in ("function", "api", "process")))
                             for s in samples)
print("job label sets counted:", dict(series))
for name, (want, counts) in jobs.items():
    got = collections.Counter()
    for s in samples:
        if all(s.labels.get(k) == v for k, v in want.items()):
            got[base(s.labels["function"])] += int(s.value)
    cupti = read_counts(counts, False)
    diff = [(f, got[f], cupti[f]) for f in sorted(got) if got[f] != cupti[f]]
    print(f"job {name}: {sum(got.values())} calls counted in {len(got)} functions; "
          f"CUPTI in the same functions {sum(cupti[f] for f in got)}; "
          f"{len(got) - len(diff)} functions equal, differ: {diff}")
PY
rmdir "$POD" "$SLURM" 2>/dev/null
cat "$txt"
