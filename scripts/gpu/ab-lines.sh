#!/usr/bin/env bash
# A/B of serve's node lines: the node part of check-lines.sh (DUTY 10%, PERIOD 1,
# NODE_SECONDS 25) in BEFORE (a whole tree, default build/basefull) and in this
# tree, in turn. Summaries: $OUT/before/lines.txt, $OUT/this/lines.txt.
# Run from the repo root, .gpukit and .whl carried: bash scripts/gpu/ab-lines.sh
export OUT
before=${BEFORE:-build/basefull}
ln -sfn "$PWD/.gpukit" "$before/.gpukit"; ln -sfn "$PWD/.whl" "$before/.whl"
for t in "$before" .; do
  label=$([ "$t" = . ] && echo this || echo before); mkdir -p "$OUT/$label"
  (cd "$t" && OUT=$OUT/$label DUTY=${DUTY:-10%} PERIOD=${PERIOD:-1} NODE_SECONDS=${NODE_SECONDS:-25} \
     PARTS=node timeout 200 bash scripts/gpu/check-lines.sh > /dev/null 2>&1)
  echo "== $label ($t)"; grep -v "^\s*\[kernel\]\|serve:" "$OUT/$label/lines.txt" | cut -c1-160 | tail -22
done
