#!/bin/bash
# VGG-19's Gatys step (style_transfer_bench: forward to conv5_1, losses, the
# backward with frozen weights) through the layer tree (--plan-training 0)
# and the training executor (1), alternated, 3 rounds, NHWC, fp32 and bf16.
# Usage: bash gatys.sh <style_transfer_bench binary> > gatys.txt
B=${1:-build/bench/style_transfer_bench}
date -u
for round in 1 2 3; do
  for prec in fp32 bf16; do
    for t in 0 1; do
      echo "== round $round precision $prec plan-training $t"
      OMP_NUM_THREADS=2 "$B" --format nhwc --precision $prec --reps 5 --warmup 1 --plan-training $t 2>&1
    done
  done
done
date -u
