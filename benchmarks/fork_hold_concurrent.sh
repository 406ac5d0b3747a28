#!/usr/bin/env bash
# Two traces holding forked children at once: ROUNDS (10) rounds of two
# `cudaprobe trace -- fork_calls 8 3 seq` started together (each child and
# grandchild calls cudaMalloc 3 times as fork returns in it), the hold's bound
# HOLD ms (2000; the default is 20). On a machine with few cores the waiting
# children of one trace can keep the other's threads from a core, so some are
# said rather than held; none may be lost unsaid. Prints each run whose JSONL
# lacks calls of a process that the summary's `untraced` does not name
# ("SILENT"), then the count of runs and of such runs.
# Run as root from the repo root, after scripts/setup:
#   bash benchmarks/fork_hold_concurrent.sh
set -u
cd "$(dirname "$0")/.."
exe=$(.venv/bin/python -c 'from tests.conftest import build_workload; print(build_workload("fork_calls.c"))')
lib=${LIB:-/usr/local/cuda/lib64/libcudart.so}
dir=$(mktemp -d)
one() {  # $1: the run's directory
  mkdir -p "$1"
  CUDAPROBE_FORK_HOLD_MS=${HOLD:-2000} timeout 120 .venv/bin/python -m cudaprobe trace \
    --lib "$lib" -e cudaMalloc -o "$1/calls.jsonl" --force -- "$exe" 8 3 seq > /dev/null 2> "$1/err"
  .venv/bin/python - "$1" <<'PY'
import collections, json, sys
d = sys.argv[1]
err = open(d + "/err").read()
said = {j["pid"]: j["calls"] for j in (json.loads(l) for l in err.splitlines()
                                        if l.startswith('{"pid"'))}
rows = [json.loads(l) for l in open(d + "/calls.jsonl")]
by_pid = collections.Counter(r["pid"] for r in rows[:-1])
untraced = {u["pid"] for u in rows[-1]["summary"].get("untraced") or []}
silent = {p: (c, by_pid.get(p, 0)) for p, c in said.items()
          if by_pid.get(p, 0) != c and p not in untraced}
if silent:
    print("SILENT", d, "pid: (calls made, rows)", silent)
PY
}
for r in $(seq "${ROUNDS:-10}"); do
  one "$dir/a$r" & one "$dir/b$r" & wait
done | tee "$dir/silent.txt"
echo "runs: $((2 * ${ROUNDS:-10})), with calls lost unsaid: $(grep -c SILENT "$dir/silent.txt")"
rm -rf "$dir"
