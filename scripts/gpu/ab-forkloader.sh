#!/usr/bin/env bash
# A/B: fork_loader launched under trace, the tree before (build/before) and this one, in turn
# Run from the repo root, .gpukit carried and the tree before copied to build/before (carried):
#   bash scripts/gpu/ab-forkloader.sh
source scripts/gpu/common.sh
FL="$TORCH_PY $PWD/scripts/gpu/fork_loader.py --epochs 12 --workers 4"
d=/tmp/flab; rm -rf $d; mkdir -p $d
$FL > $d/alone.out 2>&1
for r in 1 2; do
  for t in before this; do
    if [ $t = before ]; then dir=build/before; else dir=.; fi
    (cd $dir && timeout -k 10 300 python3 -m cudaprobe trace -f jsonl -o $d/$t$r.jsonl --force -- $FL > $d/$t$r.out 2> $d/$t$r.err)
    python3 - $d $t$r <<'PY'
import json, statistics, sys, os
d, run = sys.argv[1:]
ep = lambda n: [json.loads(l) for l in open(os.path.join(d, n)) if l.startswith("{")]
alone, got = ep("alone.out"), ep(run + ".out")
rows = [json.loads(l) for l in open(os.path.join(d, run + ".jsonl"))]
s = rows[-1]["summary"]
print(f"{run}: epochs {len(got)}, losses same {[a['loss'] for a in alone] == [g['loss'] for g in got]}, "
      f"epoch median {statistics.median(e['seconds'] for e in got):.3f} (alone {statistics.median(e['seconds'] for e in alone):.3f}), "
      f"per epoch {[round(e['seconds'], 2) for e in got]}, processes {s.get('processes_traced')}, spans {len(s.get('untraced') or [])}, lost {s.get('lost_total')}")
PY
  done
done
