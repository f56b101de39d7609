#!/usr/bin/env bash
# Side by side: a9e366f's cifarnet_bench (OLD: streaming stores in the
# forward's passes) against this commit's (NEW: also the backward sum that
# writes a batch norm's dy), both with streaming stores on, bf16 training,
# the order swapped each round, 6 rounds of 9 repetitions; then each
# binary's per-layer profile of the ResNet-20 sums and second batch norms.
# Usage: OLD=<a9e366f build>/bench/cifarnet_bench NEW=build/bench/cifarnet_bench bash run_sums.sh
set -euo pipefail
: "${OLD:?}" "${NEW:?}"
echo "# $(date -u +%FT%TZ) $(lscpu | grep 'Model name' | sed 's/ \+/ /g'), $(nproc) CPUs"
echo "# OLD=$OLD NEW=$NEW"
for round in 1 2 3 4 5 6; do
  if [ $((round % 2)) = 1 ]; then order="$OLD $NEW"; else order="$NEW $OLD"; fi
  for b in $order; do
    tag=$([ "$b" = "$OLD" ] && echo old || echo new)
    "$b" --only resnet20,resnet56 --formats nhwc --precision bf16 --reps 9 --profile 0 2>&1 |
      grep -E '^resnet' | sed "s/^/round $round $tag  /"
  done
done
for b in "$OLD" "$NEW"; do
  tag=$([ "$b" = "$OLD" ] && echo old || echo new)
  echo "== profile, $tag"
  "$b" --only resnet20 --formats nhwc --precision bf16 --reps 7 2>&1 |
    grep -E '^resnet|stem/bn1|bn2 |/add |per kind|booked|^streaming'
done
echo "# $(date -u +%FT%TZ) end"
