#!/usr/bin/env bash
# Side by side: fb550b5's cifarnet_bench (OLD) against this commit's (NEW)
# with its streaming stores off and on (--streaming-stores 0 / 1), bf16
# training, the order rotated each round, 4 rounds of 7 repetitions; then
# NEW's per-layer profile of ResNet-20 with them off and on.
# Usage: OLD=<old build>/bench/cifarnet_bench NEW=build/bench/cifarnet_bench bash run.sh
set -euo pipefail
: "${OLD:?}" "${NEW:?}"
echo "# $(date -u +%FT%TZ) $(lscpu | grep 'Model name' | sed 's/ \+/ /g'), $(nproc) CPUs"
echo "# OLD=$OLD NEW=$NEW"
variants=("old|$OLD" "new-off|$NEW --streaming-stores 0" "new-on|$NEW --streaming-stores 1")
for round in 1 2 3 4; do
  for i in 0 1 2; do
    v=${variants[$(((i + round) % 3))]}
    tag=${v%%|*}
    # shellcheck disable=SC2086
    ${v#*|} --only resnet20,resnet56 --formats nhwc --precision bf16 --reps 7 --profile 0 2>&1 |
      grep -E '^resnet|^streaming' | sed "s/^/round $round $tag  /"
  done
done
for s in 0 1; do
  echo "== profile, new, --streaming-stores $s"
  "$NEW" --only resnet20 --formats nhwc --precision bf16 --reps 5 --streaming-stores $s 2>&1 |
    grep -E '^resnet|stem/|stage1/block./(conv1|bn2) |avg_pool|per kind|booked|^streaming'
done
echo "# $(date -u +%FT%TZ) end"
