#!/usr/bin/env bash
# Every descendant of a traced command, from its first call, on the GPU
# machine: each process's rows against the CUPTI callback counter run in that
# very process (benchmarks/oracle/cupti_counter.c; CUPTI_COUNTER_OUT=DIR/%p.cupti
# gives one file a process), compared by benchmarks/oracle/compare.py --pid.
#   two       cudaprobe trace -- bash -c 'python mlp; python gemm'
#   loader    cudaprobe trace -- python dataloader_cuda.py: a DataLoader whose two
#             spawned workers use CUDA
#   torchrun  cudaprobe trace -- torchrun --nproc_per_node 2 (NCCL; on 2 GPUs only)
#   torchrun1 the same on one GPU, its two ranks averaging through gloo (scripts/gpu/gloo_ranks.py),
#             losses against the run alone bit for bit (not in the default PARTS)
#   forked    cudaprobe trace -- python fork_cuda.py: two children forked without exec
#             use CUDA at once, then two that wait 0.5 s first (not in the default PARTS)
#   pid       a bash loop of three pythons started alone; cudaprobe trace --pid
#             --wait attached while the first runs: the two started after it, whole
#   compile   cudaprobe trace -- bash -c 'python torch.compile model': each process counted,
#             and the same python alone (the differences it has there too: cuBLAS's static runtime)
# PARTS (default "two loader torchrun pid") picks some; "forkloader": a training loop
# whose DataLoader forks its 4 workers each epoch (fork_loader.py), alone, under trace
# and with trace --pid -d 6 attached after epoch 2: its losses bit for bit, its epochs'
# seconds, the workers' processes; "forkcycles": the same loop with 8 attaches of 1.5 s, every
# other cudaprobe killed (-9) mid-run, its 120 losses against the run alone; "gputime" adds
# trace --gpu-time -- bash -c 'python mlp; python gemm': each process's launches with GPU time;
# "pidgpu": trace --pid BASH --gpu-time of a bash loop started alone, whose later children
# (event_kernels, launching from its first call and timing each kernel with CUDA events,
# then python gemm) get the GPU-time library from their first call: kernels timed against
# the count and event time the program printed; "pystacks": trace --py-stacks -- bash -c
# 'python mlp': the child's rows with their Python line, against the same run started alone.
# Results: $OUT/descendants.txt (readable), $OUT/descendants.jsonl (one object a process).
# Run from the repo root, .gpukit carried: bash scripts/gpu/check-descendants.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build_oracle || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
W="$TORCH_PY benchmarks/torch_workloads.py"
txt=$OUT/descendants.txt; jl=$OUT/descendants.jsonl; : > "$txt"; : > "$jl"
{ date -u; nvidia-smi -L; git log --oneline -1 2>/dev/null; } >> "$txt" 2>&1

compare_tree() {  # $1 label, $2 the run's directory (PID.cupti files, trace.jsonl, err)
  local f pid
  grep -v "SyntaxWarning\|re.match" "$2/err" | grep "cudaprobe:\|calls in\|not traced" \
    | tail -4 >> "$txt"
  for f in "$2"/*.cupti; do
    [ -e "$f" ] || continue
    pid=$(basename "$f" .cupti)
    python3 benchmarks/oracle/compare.py "$f" "$2/trace.jsonl" --pid "$pid" \
      --json /tmp/cmp.json > /tmp/cmp.txt 2>&1
    echo "-- $1 pid $pid: $(grep -c ' DIFF$' /tmp/cmp.txt) functions differ" >> "$txt"
    grep ' DIFF$' /tmp/cmp.txt | head -8 >> "$txt"
    python3 -c 'import json,sys; d=json.load(open("/tmp/cmp.json")); d.pop("untraced");
d["run"]=sys.argv[1]; d["pid"]=int(sys.argv[2]); print(json.dumps(d))' "$1" "$pid" >> "$jl"
  done
  python3 - "$2" >> "$txt" <<'PY'
import json, os, sys
d = sys.argv[1]
rows = {}
for line in open(os.path.join(d, "trace.jsonl")):
    r = json.loads(line)
    if "pid" in r:
        rows[r["pid"]] = rows.get(r["pid"], 0) + 1
counted = {int(f[:-6]) for f in os.listdir(d) if f.endswith(".cupti")}
print(f"processes with rows: {len(rows)}, with a CUPTI count: {len(counted)}; "
      f"rows without a count: {sorted(set(rows) - counted)}; "
      f"counted, no rows: {sorted(counted - set(rows))}")
PY
}

run_tree() {  # $1 label, then the command: under cudaprobe trace, each process counted
  local label=$1 d=/tmp/desc-$1 start=$SECONDS rc
  shift
  rm -rf "$d"; mkdir -p "$d"
  echo "== $label: $*" >> "$txt"
  CUDA_INJECTION64_PATH=$ORACLE CUPTI_COUNTER_OUT=$d/%p.cupti timeout -k 10 300 \
    python3 -m cudaprobe trace -f jsonl -o "$d/trace.jsonl" --force -- "$@" > "$d/out" 2> "$d/err"
  rc=$?
  echo "$label: exit $rc in $((SECONDS - start)) s; workload said: $(tail -c 300 "$d/out" | tr '\n' ' ')" >> "$txt"
  compare_tree "$label" "$d"
}

PARTS=" ${PARTS:-two loader torchrun pid} "
if [[ $PARTS == *" two "* ]]; then
  echo "step two" >&2
  run_tree two bash -c "$W mlp --iters 300; $W gemm --iters 50"
fi
if [[ $PARTS == *" loader "* ]]; then
  echo "step loader" >&2
  run_tree loader "$TORCH_PY" scripts/gpu/dataloader_cuda.py --items 256 --workers 2
fi
if [[ $PARTS == *" forked "* ]]; then  # forks without exec using CUDA: at once, and 0.5 s later
  run_tree forked "$TORCH_PY" scripts/gpu/fork_cuda.py --children 2 --steps 200
  run_tree forked-wait "$TORCH_PY" scripts/gpu/fork_cuda.py --children 2 --steps 200 --wait 0.5
fi
if [[ $PARTS == *" compile "* ]]; then
  echo "step compile" >&2
  run_tree compile bash -c "$W compile --iters 200; true"
  run_tree compile-alone $W compile --iters 200  # the differences a process has alone
fi
if [[ $PARTS == *" torchrun1 "* ]]; then  # two ranks on one GPU (gloo): the tree, not NCCL
  echo "step torchrun1" >&2
  TR="/opt/torch/.venv/bin/torchrun --nproc_per_node 2 --master_port 29514 scripts/gpu/gloo_ranks.py --steps 200"
  $TR > /tmp/desc-torchrun1-alone.out 2>&1; echo "torchrun1 alone: exit $?" >> "$txt"
  run_tree torchrun1 $TR
  python3 - /tmp/desc-torchrun1-alone.out /tmp/desc-torchrun1/out >> "$txt" <<'PY'
import json, sys
def losses(path):
    return sorted((j["rank"], j["step"], j["loss"]) for j in
                  (json.loads(l[l.index("{"):]) for l in open(path) if '"rank"' in l))
alone, traced = losses(sys.argv[1]), losses(sys.argv[2])
print(f"torchrun1: {len(traced)} rank-steps traced, {len(alone)} alone, losses bit-identical: "
      f"{alone == traced and len(alone) > 0}")
PY
fi
if [[ $PARTS == *" torchrun "* ]] && [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  echo "step torchrun" >&2
  rm -rf /tmp/desc-nccl; mkdir -p /tmp/desc-nccl
  run_tree torchrun /opt/torch/.venv/bin/torchrun --nproc_per_node 2 --master_port 29513 \
    scripts/gpu/nccl_workload.py --out /tmp/desc-nccl --iters 20 --warmup 2 --slow 10 \
    --slow-rank 1 --slow-ms 30
  # each rank's NCCL calls, as the workload counted them, against its rows
  python3 - /tmp/desc-nccl /tmp/desc-torchrun/trace.jsonl >> "$txt" <<'PY'
import collections, json, pathlib, sys
sys.path.insert(0, "scripts/gpu")
from nccl_rows import rows as outer_calls  # ncclBcast's own ncclBroadcast left out
rows = collections.Counter()
for r in outer_calls(pathlib.Path(sys.argv[2]))[0]:
    if r.get("event", "").startswith("nccl"):
        rows[(r["pid"], r["event"])] += 1
for f in sorted(pathlib.Path(sys.argv[1]).glob("rank.*.json")):
    j = json.loads(f.read_text())
    want = collections.Counter()
    for op in j["ops"].values():
        want[op["function"]] += op["warmup_calls"] + op["timed_calls"]
    want[j["slow_call"]["function"]] += j["slow"]
    # "ncclBroadcast|ncclBcast": either, as torch's NCCL build calls it
    got = {fn: sum(rows[(j["pid"], f)] for f in fn.split("|")) for fn in want}
    print(f"rank {j['rank']} pid {j['pid']} NCCL calls: workload {dict(want)}, rows {got}: "
          f"{'equal' if got == dict(want) else 'DIFF'}")
PY
fi

if [[ $PARTS == *" gputime "* ]]; then  # not in the default PARTS: no CUPTI counter here
  echo "step gputime" >&2
  d=/tmp/desc-gputime; rm -rf "$d"; mkdir -p "$d"
  echo "== gputime: trace --gpu-time -- bash -c 'python mlp; python gemm': GPU time per process" >> "$txt"
  timeout -k 10 300 python3 -m cudaprobe trace --gpu-time -f jsonl -o "$d/trace.jsonl" --force \
    -- bash -c "$W mlp --iters 300; $W gemm --iters 50" > "$d/out" 2> "$d/err"
  echo "gputime: exit $?; workload said: $(tail -c 300 "$d/out" | tr '\n' ' ')" >> "$txt"
  grep "cudaprobe:\|calls in\|not traced\|GPU" "$d/err" | tail -6 >> "$txt"
  python3 - "$d/trace.jsonl" >> "$txt" <<'PY'
import collections, json, sys
launches, timed, gpu_ns = collections.Counter(), collections.Counter(), collections.Counter()
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "Launch" in r.get("event", ""):
        launches[r["pid"]] += 1
        if r.get("gpu"):
            timed[r["pid"]] += 1
            gpu_ns[r["pid"]] += r["gpu"]["duration_ns"]
for pid in sorted(launches):
    print(f"pid {pid}: {launches[pid]} launches, {timed[pid]} with GPU time, "
          f"{gpu_ns[pid] / 1e6:.1f} ms of kernels")
PY
fi
if [[ $PARTS == *" pidgpu "* ]]; then
  echo "step pidgpu" >&2
  d=/tmp/desc-pidgpu; rm -rf "$d"; mkdir -p "$d"
  nvcc -O2 -o "$d/event_kernels" scripts/gpu/event_kernels.cu || exit 1
  echo "== pidgpu: trace --pid BASH --gpu-time; its later children timed from their first call" >> "$txt"
  bash -c "sleep 6; $d/event_kernels 300; $d/event_kernels 50 2000000; $W gemm --iters 50; \
    $d/event_kernels 100" > "$d/out" 2>&1 &
  bpid=$!
  sleep 0.5
  timeout -k 10 300 python3 -m cudaprobe trace --pid $bpid --wait --gpu-time -f jsonl \
    -o "$d/trace.jsonl" --force 2> "$d/err"
  echo "pidgpu: trace exit $?" >> "$txt"
  wait $bpid; echo "bash exit $?" >> "$txt"
  grep "cudaprobe:\|calls in\|not traced\|GPU" "$d/err" | grep -v "^cudaprobe: pid .* exited" \
    | tail -12 >> "$txt"
  python3 - "$d/trace.jsonl" "$d/out" >> "$txt" <<'PY'
import collections, json, re, sys
launches, timed, gpu_ns = collections.Counter(), collections.Counter(), collections.Counter()
names = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("event", "").startswith("cudaLaunch") or "Launch" in r.get("event", "") and (
            r.get("process", "").startswith("python")):  # (the runtime's, not its cuLaunch)
        launches[r["pid"]] += 1
        names[r["pid"]] = r.get("process", "?")
        if r.get("gpu"):
            timed[r["pid"]] += 1
            gpu_ns[r["pid"]] += r["gpu"]["duration_ns"]
said = [(int(n), float(ms)) for n, ms in re.findall(r"kernels (\d+) event_ms ([\d.]+)",
                                                    open(sys.argv[2]).read())]
# the runs in the order they ran: bash's own pid runs the last (bash execs it)
ours = sorted((p for p in launches if names[p].startswith("event_kernels")),
              key=lambda p: (p == min(launches), p))
for pid in sorted(launches):
    print(f"pid {pid} ({names[pid]}): {launches[pid]} launches, {timed[pid]} with GPU time, "
          f"{gpu_ns[pid] / 1e6:.2f} ms of kernels")
for pid, (n, ms) in zip(ours, said):
    ok = launches[pid] == timed[pid] == n and abs(gpu_ns[pid] / 1e6 - ms) <= 0.1 * ms
    print(f"event_kernels pid {pid}: printed {n} kernels, {ms:.2f} ms by CUDA events; "
          f"cudaprobe {timed[pid]} timed, {gpu_ns[pid] / 1e6:.2f} ms: {'equal' if ok else 'DIFF'}")
if len(ours) != len(said):
    print(f"DIFF: {len(said)} event_kernels runs printed, {len(ours)} traced")
PY
fi
if [[ $PARTS == *" pystacks "* ]]; then
  echo "step pystacks" >&2
  d=/tmp/desc-pystacks; rm -rf "$d"; mkdir -p "$d"
  echo "== pystacks: --py-stacks, python mlp alone and as a child of bash" >> "$txt"
  timeout -k 10 300 python3 -m cudaprobe trace --py-stacks -f jsonl -o "$d/alone.jsonl" \
    --force -- $W mlp --iters 200 > /dev/null 2> "$d/err1"
  timeout -k 10 300 python3 -m cudaprobe trace --py-stacks -f jsonl -o "$d/tree.jsonl" \
    --force -- bash -c "$W mlp --iters 200; true" > /dev/null 2> "$d/err2"
  python3 - "$d/alone.jsonl" "$d/tree.jsonl" >> "$txt" <<'PY'
import collections, json, sys
for path in sys.argv[1:]:
    rows = [json.loads(x) for x in open(path)][:-1]
    launches = [r for r in rows if "Launch" in r.get("event", "")]
    main = [r for r in launches if r["tid"] == r["pid"]]
    lines = collections.Counter()
    for r in main:
        frames = r.get("py_stack") or []
        user = [f for f in frames if "torch_workloads.py" in f.get("file", "")]
        lines[f"torch_workloads.py:{user[0]['line']}" if user else "(none)"] += 1
    print(f"{path.rsplit('/', 1)[1]}: {len(launches)} launches, {len(main)} on the main "
          f"thread, by line: {dict(lines.most_common(6))}")
PY
fi
if [[ $PARTS == *" forkloader "* ]]; then  # a DataLoader's forked workers, held each epoch
  echo "step forkloader" >&2
  d=/tmp/desc-fl; rm -rf "$d"; mkdir -p "$d"
  FL="$TORCH_PY scripts/gpu/fork_loader.py --epochs 12 --workers 4"
  echo "== forkloader: $FL alone, under trace, and with trace --pid -d 6 attached after epoch 2" >> "$txt"
  $FL > "$d/alone.out" 2> "$d/alone.err"; echo "alone: exit $?" >> "$txt"
  timeout -k 10 300 python3 -m cudaprobe trace -f jsonl -o "$d/launched.jsonl" --force -- $FL \
    > "$d/launched.out" 2> "$d/launched.err"
  echo "launched: exit $?" >> "$txt"
  $FL > "$d/attached.out" 2> "$d/attached.err" &
  fl=$!
  until grep -q '"epoch": 2' "$d/attached.out" 2>/dev/null; do sleep 0.1; done
  timeout -k 10 120 python3 -m cudaprobe trace --pid $fl -d 6 -f jsonl -o "$d/attached.jsonl" \
    --force 2> "$d/attached-trace.err"
  echo "attached trace: exit $?" >> "$txt"
  wait $fl; echo "attached workload: exit $?" >> "$txt"
  for r in launched attached; do
    grep -E "processes traced|calls in|not traced" "$d/$r.err" "$d/$r-trace.err" 2>/dev/null \
      | sed "s|^|$r: |" | head -6 >> "$txt"
  done
  python3 - "$d" >> "$txt" <<'PY'
import collections, json, os, statistics, sys
d = sys.argv[1]
def epochs(name):
    return [json.loads(l) for l in open(os.path.join(d, name)) if l.startswith("{")]
alone = epochs("alone.out")
for run in ("launched", "attached"):
    got = epochs(run + ".out")
    same = [a["loss"] == b["loss"] for a, b in zip(alone, got)]
    rows = [json.loads(l) for l in open(os.path.join(d, run + ".jsonl"))]
    by_pid = collections.Counter(r["pid"] for r in rows if "pid" in r)
    s = rows[-1]["summary"]
    print(f"{run}: {len(got)} of {len(alone)} epochs, losses bit-identical: {all(same) and len(got) == len(alone)} "
          f"({sum(same)}); epoch seconds median {statistics.median(e['seconds'] for e in got):.3f} "
          f"against {statistics.median(e['seconds'] for e in alone):.3f} alone; rows {len(rows) - 1}, "
          f"lost {s.get('lost_total')}, processes traced {s.get('processes_traced')}, processes with rows "
          f"{len(by_pid)}, spans not traced {len(s.get('untraced') or [])}")
PY
fi
if [[ $PARTS == *" forkcycles "* ]]; then  # attach, detach and kill -9 while workers are held
  echo "step forkcycles" >&2
  d=/tmp/desc-fc; rm -rf "$d"; mkdir -p "$d"
  FL="$TORCH_PY scripts/gpu/fork_loader.py --epochs 120 --workers 4"
  echo "== forkcycles: $FL alone, then again with 8 cycles of trace --pid attached for 1.5 s, every other one killed (-9) mid-run" >> "$txt"
  $FL > "$d/alone.out" 2> "$d/alone.err"; echo "alone: exit $?" >> "$txt"
  $FL > "$d/cycled.out" 2> "$d/cycled.err" &
  fl=$!
  until grep -q '"epoch": 1' "$d/cycled.out" 2>/dev/null; do sleep 0.1; done
  for c in 1 2 3 4 5 6 7 8; do
    kill -0 $fl 2>/dev/null || break
    if (( c % 2 )); then
      timeout -k 10 60 python3 -m cudaprobe trace --pid $fl -d 1.5 -f jsonl -o "$d/c$c.jsonl" --force \
        2> "$d/c$c.err"; echo "cycle $c: trace exit $?" >> "$txt"
    else
      python3 -m cudaprobe trace --pid $fl -f jsonl -o "$d/c$c.jsonl" --force 2> "$d/c$c.err" &
      tp=$!; sleep 1.5; kill -9 $tp; wait $tp 2>/dev/null; sleep 0.5
      echo "cycle $c: killed (-9) after 1.5 s; cudaprobe's processes 0.5 s later: $(ps -eo comm | grep cudaprobe | sort | uniq -c | tr '\n' ' ')" >> "$txt"
    fi
    sleep 0.3
  done
  wait $fl; echo "cycled workload: exit $?" >> "$txt"
  python3 - "$d" >> "$txt" <<'PY'
import json, os, sys
d = sys.argv[1]
ep = lambda n: [json.loads(l) for l in open(os.path.join(d, n)) if l.startswith("{")]
alone, got = ep("alone.out"), ep("cycled.out")
print(f"forkcycles: {len(got)} of {len(alone)} epochs, losses bit-identical: "
      f"{[a['loss'] for a in alone] == [g['loss'] for g in got]}")
PY
  grep -h "processes traced\|calls in" "$d"/c*.err | head -12 >> "$txt"
fi
[[ $PARTS == *" pid "* ]] || exit 0
echo "step pid" >&2
d=/tmp/desc-pid; rm -rf "$d"; mkdir -p "$d"
echo "== pid: bash loop of loop (25 s), gemm, mlp; --pid --wait attached while the first runs" >> "$txt"
CUDA_INJECTION64_PATH=$ORACLE CUPTI_COUNTER_OUT=$d/%p.cupti bash -c \
  "$W loop --seconds 25; $W gemm --iters 50; $W mlp --iters 300" > "$d/out" 2>&1 &
bpid=$!
for _ in $(seq 300); do  # the first python is running its steps
  pgrep -P $bpid > /dev/null && [ -e /proc/$(pgrep -P $bpid | head -1) ] && sleep 8 && break
  sleep 0.1
done
first=$(pgrep -P $bpid | head -1)
echo "first python: pid $first (started before the attach)" >> "$txt"
timeout -k 10 300 python3 -m cudaprobe trace --pid $bpid --wait -f jsonl -o "$d/trace.jsonl" \
  --force 2> "$d/err"
echo "pid: trace exit $?" >> "$txt"
wait $bpid
compare_tree pid "$d"
echo "done" >&2
