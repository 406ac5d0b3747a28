#!/usr/bin/env bash
# `trace --comm NAME` on the GPU machine: links per process, against the CUPTI
# callback counter, with a bystander that maps the same libraries.
#
# For each PyTorch workload of benchmarks/torch_workloads.py (WORKLOADS), two
# copies run at once under the counter, each paused after its warm-up:
#   target     exec'd under the name `cpcomm` (a symlink to the venv's python)
#   bystander  exec'd under the name `cpother` (another symlink to the same python)
# `cudaprobe trace --comm cpcomm` attaches; both copies run their measured part;
# the trace's counts of the target are compared with the counter's window
# (benchmarks/oracle/compare.py --window); the bystander must have taken no trap:
# no `[uprobes]` page in its maps (the kernel maps it at a process's first hit)
# and no row of its pid in the trace.
# Results: $OUT/comm.txt (readable), $OUT/comm.jsonl (one object per run).
# Run from the repo root, .gpukit carried: bash scripts/gpu/check-comm.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKLOADS=${WORKLOADS:-mlp compile}
CUPTI_LIB=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda-*/ -name 'libcupti.so' 2>/dev/null | head -1)")
ORACLE=/tmp/cupti_counter.so
gcc -O2 -shared -fPIC -o $ORACLE benchmarks/oracle/cupti_counter.c -I/usr/local/cuda/include \
  -I/usr/local/cuda/extras/CUPTI/include -L"$CUPTI_LIB" -lcupti -Wl,-rpath,"$CUPTI_LIB" || exit 1
txt=$OUT/comm.txt; jl=$OUT/comm.jsonl; : > "$txt"; : > "$jl"
# two names for the venv's python, beside it (its pyvenv.cfg found as for `python`)
BIN=$(dirname "$TORCH_PY")
ln -sf python "$BIN/cpcomm"; ln -sf python "$BIN/cpother"
trap 'rm -f "$BIN/cpcomm" "$BIN/cpother"' EXIT
args_of() { case $1 in mlp) echo "--iters 300";; compile) echo "--iters 300";; esac; }
waitfor() {  # $1: a test command, $2: seconds
  local n=0
  until eval "$1"; do
    sleep 0.1; n=$((n + 1))
    [ $n -gt $(($2 * 10)) ] && { echo "TIMEOUT waiting for: $1" >> "$txt"; return 1; }
  done
  return 0  # (the loop's status is its last test's)
}
start() {  # $1 name (cpcomm|cpother), $2 workload: starts it paused after warm-up
  local n=$1 w=$2
  rm -f /tmp/$n.ready /tmp/$n.go /tmp/$n.done /tmp/$n.quit /tmp/$n.cupti.window
  CUDA_INJECTION64_PATH=$ORACLE CUPTI_COUNTER_OUT=/tmp/$n.cupti \
    "$BIN/$n" benchmarks/torch_workloads.py "$w" $(args_of "$w") \
    --ready /tmp/$n.ready --go /tmp/$n.go --done /tmp/$n.done --quit /tmp/$n.quit > /tmp/$n.out 2>&1 &
}

for w in $WORKLOADS; do
  start cpcomm "$w"; tpid=$!
  start cpother "$w"; bpid=$!
  waitfor "[ -e /tmp/cpcomm.ready ] && [ -e /tmp/cpother.ready ]" 180 || continue
  echo "$w: target pid $tpid comm $(cat /proc/$tpid/comm), bystander pid $bpid comm $(cat /proc/$bpid/comm)" >> "$txt"
  t0=$(date +%s.%N)
  python3 -m cudaprobe trace --comm cpcomm -f jsonl -o /tmp/$w-comm.jsonl --force 2>/tmp/$w-comm.err &
  cpid=$!
  # said once the links of the processes of that name running now are in
  if waitfor "grep -q 'following every process named' /tmp/$w-comm.err || ! kill -0 $cpid 2>/dev/null" 120; then
    echo "$w: following in $(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$t0" "$(date +%s.%N)") s" >> "$txt"
    touch /tmp/cpcomm.go /tmp/cpother.go
    waitfor "[ -e /tmp/cpcomm.done ] && [ -e /tmp/cpother.done ]" 300
  fi
  echo "$w bystander [uprobes] pages: $(grep -c '\[uprobes\]' /proc/$bpid/maps); target's: $(grep -c '\[uprobes\]' /proc/$tpid/maps)" >> "$txt"
  kill -TERM $cpid 2>/dev/null; wait $cpid
  touch /tmp/cpcomm.go /tmp/cpother.go /tmp/cpcomm.quit /tmp/cpother.quit; wait $tpid $bpid
  grep -v "SyntaxWarning\|re.match" /tmp/$w-comm.err | tail -4 >> "$txt"
  cp /tmp/$w-comm.err "$OUT/"
  python3 - "$w" "$bpid" /tmp/$w-comm.jsonl >> "$txt" <<'EOF'
import collections, json, sys
pids = collections.Counter(json.loads(l).get("pid") for l in open(sys.argv[3]) if l.startswith("{"))
print(f"{sys.argv[1]} rows by pid: {dict(pids)}; the bystander's: {pids.get(int(sys.argv[2]), 0)}")
EOF
  echo "== $w comm" >> "$txt"
  python3 benchmarks/oracle/compare.py /tmp/cpcomm.cupti.window /tmp/$w-comm.jsonl --window \
    --json /tmp/cmp.json >> "$txt" 2>&1
  python3 -c 'import json,sys; d=json.load(open("/tmp/cmp.json")); d.pop("untraced", None);
d["run"]=sys.argv[1]; print(json.dumps(d))' "$w comm" >> "$jl"
done
cat "$txt"
