#!/usr/bin/env bash
# The table a person reads, on the GPU machine, at a terminal of 80, 100 and
# 160 columns (a real pty, scripts/gpu/pty_run.py): PyTorch started under
# `cudaprobe trace`, the rows checked by table_check.py (every line within the
# width, one line a row, each malloc/copy/launch row's size or kernel name first
# in DETAILS) and counted against the CUPTI callback counter run in the same
# process; then --py-stacks at 80, `trace --pid` attached mid-run at 100, and
# stats at 100 (names whole, rows on one line). Pictures: $OUT/table-W*.txt;
# summary: $OUT/table.txt. Run from the repo root, .gpukit carried:
#   bash scripts/gpu/check-table.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build_oracle || exit 1
W="$TORCH_PY benchmarks/torch_workloads.py"
EV=cudaMalloc,cudaMemcpyAsync,cudaMemsetAsync,cudaLaunchKernel,cudaStreamSynchronize
txt=$OUT/table.txt; : > "$txt"
{ date -u; nvidia-smi -L; git log --oneline -1 2>/dev/null; } >> "$txt" 2>&1
fails=0
for width in 80 100 160; do
  for wl in loop mlp; do
    d=/tmp/table-$width-$wl; rm -rf "$d"; mkdir -p "$d"
    echo "== trace -- $wl at $width columns" | tee -a "$txt"
    CUDA_INJECTION64_PATH=$ORACLE CUPTI_COUNTER_OUT=$d/counts.txt timeout -k 10 240 \
      python3 scripts/gpu/pty_run.py "$width" "$d/shown.txt" -- python3 -m cudaprobe trace \
      -e $EV -- sh -c "$W $wl --seconds 1 --warmup 3 > $d/workload.out"
    echo "exit $?; the workload: $(cat "$d/workload.out")" >> "$txt"
    python3 scripts/gpu/table_check.py "$d/shown.txt" "$width" "$d/counts.txt" --events $EV \
      >> "$txt" || fails=$((fails + 1))
    [ $wl = mlp ] && python3 scripts/gpu/table_picture.py "$d/shown.txt" 3 > "$OUT/table-w$width.txt"
  done
done
tail -n +4 "$txt"

echo "== --py-stacks at 80 columns" | tee -a "$txt"
d=/tmp/table-py; rm -rf "$d"; mkdir -p "$d"
CUDA_INJECTION64_PATH=$ORACLE CUPTI_COUNTER_OUT=$d/counts.txt timeout -k 10 240 \
  python3 scripts/gpu/pty_run.py 80 "$d/shown.txt" -- python3 -m cudaprobe trace --py-stacks \
  -e $EV -- sh -c "$W mlp --seconds 1 --warmup 3 > $d/workload.out"
python3 scripts/gpu/table_check.py "$d/shown.txt" 80 "$d/counts.txt" --events $EV >> "$txt" \
  || fails=$((fails + 1))
echo "rows with a Python line: $(grep -c 'workloads.py:[0-9]' "$d/shown.txt")" >> "$txt"
python3 scripts/gpu/table_picture.py "$d/shown.txt" 3 > "$OUT/table-w80-pystacks.txt"

echo "== trace --pid, attached mid-run, at 100 columns" | tee -a "$txt"
d=/tmp/table-pid; rm -rf "$d"; mkdir -p "$d"
$W mlp --seconds 25 --warmup 3 > "$d/workload.out" 2>&1 &
P=$!
sleep 10
timeout -k 10 120 python3 scripts/gpu/pty_run.py 100 "$d/shown.txt" -- python3 -m cudaprobe \
  trace --pid $P -d 3 --py-stacks -e $EV
echo "exit $? (124: -d over)" >> "$txt"
python3 - "$d/shown.txt" 100 >> "$txt" <<'PY' || fails=$((fails + 1))
import re, sys, unicodedata
lines = open(sys.argv[1]).read().splitlines()
w = int(sys.argv[2])
cells = lambda t: sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in t)
rows = [l for l in lines if re.match(r"^ +\d+\.\d{3} ", l)]
wide = [l for l in lines if cells(l) > w]
py = [l for l in rows if "workloads.py:" in l]
print(f"--pid: {len(rows)} rows, {len(py)} with a Python line, {len(wide)} lines too wide"
      f" -> {'OK' if rows and not wide and py else 'FAIL'}")
sys.exit(0 if rows and not wide and py else 1)
PY
kill $P 2>/dev/null; wait $P 2>/dev/null
python3 scripts/gpu/table_picture.py "$d/shown.txt" 6 > "$OUT/table-w100-pid.txt"

echo "== stats at 100 columns" | tee -a "$txt"
d=/tmp/table-stats; rm -rf "$d"; mkdir -p "$d"
timeout -k 10 240 python3 scripts/gpu/pty_run.py 100 "$d/shown.txt" -- python3 -m cudaprobe \
  stats -e all -- sh -c "$W mlp --seconds 1 --warmup 3 >/dev/null"
python3 - "$d/shown.txt" >> "$txt" <<'PY' || fails=$((fails + 1))
import sys
lines = open(sys.argv[1]).read().splitlines()
rows = [l for l in lines if "│" in l]
names = [l.split()[0] for l in rows if not l.startswith(" " * 3)]
cut = [n for n in names if "…" in n]
wide = [l for l in lines if len(l) > 100]
ok = rows and not cut and not wide and len(names) == len(set(names))
print(f"stats: {len(names)} rows, {len(cut)} names cut, {len(wide)} lines too wide,"
      f" {len(names) - len(set(names))} wrapped -> {'OK' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
cp "$d/shown.txt" "$OUT/table-w100-stats.txt"
echo "checks failed: $fails" | tee -a "$txt"
cat "$txt"
