#!/usr/bin/env bash
# Where the end of `trace --pid P -d 5 --gpu-time` spends its time: the command under cProfile,
# on benchmarks/pystacks_torch.py running alone. Summary: $OUT/prof.txt.
# Run from the repo root, .gpukit carried: bash scripts/gpu/profile-gputime-end.sh
source scripts/gpu/common.sh
W=benchmarks/pystacks_torch.py
$TORCH_PY $W --steps 1000000 > /tmp/p-workload.out 2>&1 &
P=$!
python3 -m cudaprobe trace --force -o /tmp/warm.jsonl -- /bin/true > /dev/null 2>&1
until grep -q "^step 100 " /tmp/p-workload.out; do sleep 0.5; done
s=$(date +%s%N)
python3 -m cProfile -o /tmp/prof.out -m cudaprobe trace --pid $P -d 5 --gpu-time -o /tmp/p.jsonl --force > /dev/null 2> /tmp/p.err
echo "wall $(( ($(date +%s%N) - s) / 1000000 )) ms" > $OUT/prof.txt
tail -3 /tmp/p.err >> $OUT/prof.txt
python3 -c "
import pstats
p = pstats.Stats('/tmp/prof.out'); p.sort_stats('cumulative').print_stats(45)
p.sort_stats('tottime').print_stats(25)" >> $OUT/prof.txt 2>&1
kill $P
