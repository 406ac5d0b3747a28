#!/usr/bin/env bash
# How long a launched PyTorch run takes under cudaprobe, beside the same run
# plain: `python -c "import torch; ..."` and the mlp workload, each plain, under
# `stats --` and `trace --`, wall time from start to cudaprobe's exit. Then the
# quick look at every object a PyTorch process maps (benchmarks/name_scan.py,
# trie and flat expressions). cudaprobe's own Python stack is dumped every 2 s
# while it runs (faulthandler), so a stall says where it is.
# Results: $OUT/launch-time.txt, $OUT/name-scan.jsonl.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
S=$OUT/launch-time.txt
: > "$S"
MLP=(benchmarks/torch_workloads.py mlp --iters 100)
IMPORT=(-c "import torch; torch.zeros(1, device='cuda'); print('imported', torch.__version__)")
say() { echo "$*" | tee -a "$S"; }

wall() {  # wall NAME CMD...: run it, say its wall time and its summary lines
  local name=$1 t0 rc
  shift
  t0=$(date +%s%N)
  "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"; rc=$?
  say "$name: rc=$rc wall=$(( ($(date +%s%N) - t0) / 1000000 )) ms"
  grep -h '"workload"\|calls in\|up to\|imported' "$OUT/$name.out" "$OUT/$name.err" \
    | cut -c1-240 | tee -a "$S"
}

probed() {  # probed NAME SUBCOMMAND ARGS...: cudaprobe, its stack dumped every 2 s
  local name=$1
  shift
  wall "$name" python3 -c "
import faulthandler, sys
faulthandler.dump_traceback_later(2, repeat=True, file=open('$OUT/$name.tb', 'w'))
sys.argv = ['cudaprobe', *sys.argv[1:]]
from cudaprobe.cli import main
main(prog_name='cudaprobe')
" "$@"
  say "  stack dumps (one per 2 s of cudaprobe's run): $(grep -c 'most recent call first' "$OUT/$name.tb")"
  grep -A14 'most recent call first' "$OUT/$name.tb" | grep -o 'cudaprobe/[a-z_/]*\.py", line [0-9]* in [a-z_]*' \
    | sort | uniq -c | sort -rn | head -6 | tee -a "$S"
}

say "date $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) commit $(git rev-parse --short HEAD 2>/dev/null)"
for round in 1 2; do
  wall "plain-import-$round" "$TORCH_PY" "${IMPORT[@]}"
  probed "stats-import-$round" stats -- "$TORCH_PY" "${IMPORT[@]}"
  wall "plain-mlp-$round" "$TORCH_PY" "${MLP[@]}"
  probed "stats-mlp-$round" stats -- "$TORCH_PY" "${MLP[@]}"
  probed "trace-mlp-$round" trace -o /tmp/launch-trace.jsonl -- "$TORCH_PY" "${MLP[@]}"
done

say "== the quick look at each object a PyTorch process maps"
"$TORCH_PY" -c "import torch, sys; torch.zeros(1, device='cuda'); print('ready', flush=True); sys.stdin.read()" \
  < <(sleep 120) > /tmp/holder.out & HOLDER=$!
for _ in $(seq 1 100); do grep -q ready /tmp/holder.out 2>/dev/null && break; sleep 0.2; done
mapfile -t OBJS < <(awk '$6 ~ /^\// {print $6}' /proc/$HOLDER/maps | sort -u)
python3 benchmarks/name_scan.py --flat "${OBJS[@]}" > "$OUT/name-scan.jsonl"
kill $HOLDER
sort -t: -k5 -g "$OUT/name-scan.jsonl" | python3 -c "
import json, sys
rows = [json.loads(l) for l in sys.stdin]
total = rows.pop() if 'names' in rows[-1] else None
rows = [r for r in rows if 'object' in r]
rows.sort(key=lambda r: -r.get('flat_s', 0))
for r in rows[:6]:
    print(f\"{r['mb']:8.1f} MB  trie {r['trie_s']:.3f} s  flat {r.get('flat_s', 0):.3f} s  {r['defines']!s:5}  {r['object']}\")
" | tee -a "$S"
tail -1 "$OUT/name-scan.jsonl" | tee -a "$S"
pack_out launch-raw.tar.gz launch-time.txt name-scan.jsonl
