#!/usr/bin/env bash
# Side by side: the previous commit's cifarnet_bench (OLD) against this
# change's (NEW), bf16 training, the order swapped each round, 4 rounds of
# 7 repetitions; then each binary's per-layer profile of ResNet-20 (stage 1's
# second convolutions, the own AMX forward's 16 -> 16). Usage: OLD=<old build>/bench/cifarnet_bench NEW=build/bench/cifarnet_bench bash run.sh
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
    grep -E '^resnet|stage1/block[0-9]/conv2 |per kind|booked'
done
echo "# $(date -u +%FT%TZ) end"
