#!/usr/bin/env bash
# Children held in their fork while cudaprobe is busy: ROUNDS (5) runs of
# `trace -e cudaMalloc -- sh -c 'bench_loop 4000000 1 & fork_calls 40 1 seq'`
# (one process calling cudaMalloc as fast as it can, traced, while 40 children,
# one at a time, and a grandchild each, call it as fork returns in them), the
# hold's default bound (20 ms). Prints, per run, how many of fork_calls' 81
# processes had every call traced, how many were said (untraced), and any
# whose calls were lost unsaid. With OLD=DIR (a checkout of another commit),
# that tree's runs alternate with this one's.
# Run as root from the repo root, after scripts/setup:
#   bash benchmarks/fork_hold_busy.sh [OLD=/tmp/before]
set -u
cd "$(dirname "$0")/.."
here=$PWD
exe=$(.venv/bin/python -c 'from tests.conftest import build_workload; print(build_workload("fork_calls.c"))')
loop=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "benchmarks"); from bench import build_loop; print(build_loop())')
lib=${LIB:-/usr/local/cuda/lib64/libcudart.so}
dir=$(mktemp -d)
one() {  # $1: the tree to run, $2: its label
  (cd "$1" && timeout 300 "$here/.venv/bin/python" -m cudaprobe trace --lib "$lib" -e cudaMalloc \
    -o "$dir/calls.jsonl" --force -- sh -c "'$loop' 4000000 1 > /dev/null & $exe 40 1 seq \
    2> '$dir/printed'; wait" > /dev/null 2> "$dir/err")
  "$here/.venv/bin/python" - "$dir" "$2" <<'PY'
import collections, json, sys
d, label = sys.argv[1:]
rows = [json.loads(l) for l in open(d + "/calls.jsonl")]
by_pid = collections.Counter(r["pid"] for r in rows[:-1])
said = [json.loads(l) for l in open(d + "/printed") if l.startswith('{"pid"')]
untraced = {u["pid"] for u in rows[-1]["summary"].get("untraced") or []}
exact = sum(by_pid.get(p["pid"], 0) == p["calls"] for p in said)
silent = [p["pid"] for p in said if by_pid.get(p["pid"], 0) != p["calls"]
          and p["pid"] not in untraced]
print(f"{label}: {len(said)} processes, {exact} with every call traced, "
      f"{len(untraced & {p['pid'] for p in said})} said, silent {silent}")
PY
}
for r in $(seq "${ROUNDS:-5}"); do
  [ -n "${OLD:-}" ] && one "$OLD" before
  one "$here" this
done
rm -rf "$dir"
