#!/usr/bin/env bash
# Streaming stores on a Zen 4 (1 MiB of L2 a core, 32 MiB of L3): one
# cifarnet_bench with --streaming-stores 0 and 1 alternated (the order
# swapped each round), bf16 ResNet-20, -56 and airbench94 training, ROUNDS
# rounds of 7 repetitions; then the per-layer profile of ResNet-20 with them
# off and on.
# Usage: [ROUNDS=8] BENCH=build/bench/cifarnet_bench bash run.sh
set -euo pipefail
: "${BENCH:?}"
rounds=${ROUNDS:-8}
echo "# $(date -u +%FT%TZ) $(lscpu | grep 'Model name' | sed 's/ \+/ /g'), $(nproc) CPUs; $(getconf LEVEL2_CACHE_SIZE) B L2, $(getconf LEVEL3_CACHE_SIZE) B L3"
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then order="0 1"; else order="1 0"; fi
  for s in $order; do
    "$BENCH" --only resnet20,resnet56,airbench --formats nhwc --precision bf16 --reps 7 --profile 0 \
      --streaming-stores "$s" 2>&1 | grep -E '^resnet|^airbench|^streaming' | sed "s/^/round $round ss=$s  /"
  done
done
for s in 0 1; do
  echo "== profile, --streaming-stores $s"
  "$BENCH" --only resnet20 --formats nhwc --precision bf16 --reps 5 --streaming-stores $s 2>&1 |
    grep -E '^resnet|stem/|stage1/block./(conv1|bn2) |stage1/block./add|avg_pool|per kind|booked|^streaming'
done
echo "# $(date -u +%FT%TZ) end"
