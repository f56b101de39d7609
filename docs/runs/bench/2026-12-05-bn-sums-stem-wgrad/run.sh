#!/usr/bin/env bash
# Side by side: 0e17bc8's cifarnet_bench (OLD) against 8cb21d1's (NEW,
# the two rules), bf16 training, the order swapped each round, 4 rounds of
# 7 repetitions; then each binary's per-layer profile of ResNet-20 (the
# blocks' second batch norms, the stem's batch norm and the sums).
# Usage: OLD=<old build>/bench/cifarnet_bench NEW=build/bench/cifarnet_bench bash run.sh
set -euo pipefail
: "${OLD:?}" "${NEW:?}"
echo "# $(date -u +%FT%TZ) $(lscpu | grep 'Model name' | sed 's/ \+/ /g'), $(nproc) CPUs"
echo "# OLD=$OLD NEW=$NEW"
for round in 1 2 3 4; do
  if [ $((round % 2)) = 1 ]; then order="$OLD $NEW"; else order="$NEW $OLD"; fi
  for b in $order; do
    tag=$([ "$b" = "$OLD" ] && echo old || echo new)
    "$b" --only resnet20,resnet56 --formats nhwc --precision bf16 --reps 7 --profile 0 2>&1 |
      grep -E '^resnet' | sed "s/^/round $round $tag  /"
  done
done
for b in "$OLD" "$NEW"; do
  tag=$([ "$b" = "$OLD" ] && echo old || echo new)
  echo "== profile, $tag"
  "$b" --only resnet20 --formats nhwc --precision bf16 --reps 5 2>&1 |
    grep -E '^resnet|stem/bn1|bn2 |/add |per kind|booked'
done
echo "# $(date -u +%FT%TZ) end"
