#!/usr/bin/env bash
# How long `trace --pid P -d 1.5` takes from start to exit when P is a loop whose
# DataLoader forks 4 workers an epoch (benchmarks/fork_loader_cpu.py), for each
# tree given, in turn, ROUNDS (3) times. A tree: a directory holding cudaprobe/
# (git archive REV cudaprobe bpf | tar -x -C DIR). Run as root from the repo:
#   ROUNDS=3 bash benchmarks/forkloader_end.sh /tmp/old /tmp/new
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=$root/.venv/bin/python
out=$(mktemp -d)
python3 "$root/benchmarks/fork_loader_cpu.py" "$root" > "$out/loop.out" 2> /dev/null &
fl=$!
trap 'kill $fl 2>/dev/null; rm -rf "$out"' EXIT
until grep -q '"epoch": 1' "$out/loop.out" 2>/dev/null; do sleep 0.1; done
for r in $(seq "${ROUNDS:-3}"); do
  for tree in "$@"; do
    s=$(date +%s%N)
    (cd "$tree" && PYTHONPATH=$tree "$py" -m cudaprobe trace --pid $fl -d 1.5 -o "$out/c.jsonl" \
      --force 2> "$out/err" > /dev/null)
    e=$(date +%s%N)
    echo "$tree: $(( (e - s) / 1000000 )) ms from start to exit; $(grep 'calls in' "$out/err")"
    sleep 1
  done
done
