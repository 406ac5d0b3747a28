#!/usr/bin/env bash
# GPU check for the CLI conventions and whole calls on a
# real driver, about 1 minute:
#  - `trace -o t.json` on the bundled demo is one JSON document (json.load);
#  - rows in call order: the driver calls the runtime makes inside its calls
#    (context creation at the first cudaMalloc) at depth >= 1, `parent` = the
#    runtime call's ts_ns;
#  - the table at 80 columns under a pty: no line wider than the terminal;
#  - `trace -- true`: the command told it loaded no CUDA;
#  - cudaMalloc/cudaFree on a real GPU (they succeed), `stats -d 2` cut in the
#    middle of the loop: cudaMalloc - cudaFree within -2..2 (each of the 2
#    threads may be cut between its two calls at the end, and at the start, as
#    the loop runs before the attach), never the thousands that probes coming
#    off one at a time left;
#  - `stats --pid` attached to a PyTorch loop 3 s into its run: the summary
#    says what ran before the attach.
# Results: $OUT/cli.txt. Run from the repo root, .gpukit and .whl carried:
#   bash scripts/gpu/check-cli.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
txt=$OUT/cli.txt; : > "$txt"
say() { echo "$*" >> "$txt"; }
date -u >> "$txt"
nvcc -cudart=shared -o build/demo examples/demo.cu >> "$txt" 2>&1

say "== trace -o t.json (one JSON document)"
cudaprobe trace -o /tmp/t.json --force -- build/demo > /dev/null 2>> "$txt"
python3 -c 'import json; d = json.load(open("/tmp/t.json"))
print("calls", len(d["calls"]), "summary rows", d["summary"]["rows"], "lost", d["summary"]["lost_total"],
      "OK" if len(d["calls"]) == d["summary"]["rows"] > 0 else "MISMATCH")' >> "$txt" 2>&1

say "== call order: depth and parent"
cudaprobe trace -e all -f jsonl -o /tmp/t.jsonl --force -- build/demo > /dev/null 2>&1
python3 - >> "$txt" 2>&1 <<'PY'
import collections, json
rows = [json.loads(x) for x in open("/tmp/t.jsonl") if x.startswith('{"')]
calls = [r for r in rows if "event" in r]
by_ts = {(r["tid"], r["ts_ns"]): r for r in calls}
depth = collections.Counter(r.get("depth") for r in calls)
print("rows", len(calls), "by depth", dict(sorted(depth.items(), key=str)))
bad = 0
for r in calls:
    if r.get("depth"):
        p = by_ts.get((r["tid"], r["parent"]))
        inside = p and p["ts_ns"] <= r["ts_ns"] and r["ts_ns"] + r["duration_ns"] <= p["ts_ns"] + p["duration_ns"]
        bad += not inside
print("nested rows whose parent is not the call around them:", bad, "OK" if bad == 0 and depth.get(1) else "MISMATCH")
for r in calls[:12]:
    print("  " * (r.get("depth") or 0) + r["event"], r.get("ret_name"))
PY

say "== the table at 80 columns (pty)"
COLUMNS=80 LINES=40 script -qec "python3 -m cudaprobe trace -- build/demo" /dev/null > /tmp/table.txt 2>&1
python3 - >> "$txt" 2>&1 <<'PY'
import re
lines = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", x).rstrip("\r\n") for x in open("/tmp/table.txt", errors="replace")]
wide = [x for x in lines if len(x) > 80]
print(len(lines), "lines,", len(wide), "wider than 80", "OK" if not wide else "MISMATCH")
print("\n".join(lines[:14]))
PY

say "== trace -- true"
cudaprobe trace -- true >> "$txt" 2>&1

say "== stats -d 2 on a cudaMalloc/cudaFree loop that succeeds, cut mid-loop (2 threads)"
gcc -O1 -I/usr/local/cuda/include -o build/malloc_free_threads tests/workloads/malloc_free_threads.c \
  -L/usr/local/cuda/lib64 -lcudart -Wl,-rpath,/usr/local/cuda/lib64 -lpthread >> "$txt" 2>&1
for i in 1 2 3; do
  cudaprobe stats -d 2 -e cudaMalloc,cudaFree -f json -o /tmp/s.json --force -- \
    timeout 6 build/malloc_free_threads 100000000 2 > /dev/null 2>&1
  python3 -c 'import json; d = json.load(open("/tmp/s.json"))
c = {f["event"]: f["count"] for f in d["functions"]}
m, f = c.get("cudaMalloc", 0), c.get("cudaFree", 0)
print("run", '"$i"', "cudaMalloc", m, "cudaFree", f, "difference", m - f, "OK" if abs(m - f) <= 2 and m > 1000 else "MISMATCH")' >> "$txt" 2>&1
done

say "== stats --pid on a PyTorch loop, attached 3 s into it"
"$TORCH_PY" benchmarks/torch_workloads.py loop --seconds 8 > /tmp/loop.out 2>&1 &
lp=$!
sleep 3
cudaprobe stats --pid $lp -d 2 > /tmp/pid.txt 2>&1
wait $lp
grep -i "not traced\|before the attach\|attached\|lost" /tmp/pid.txt >> "$txt"
tail -3 /tmp/pid.txt >> "$txt"
cat "$txt"
