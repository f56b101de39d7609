#!/bin/bash
# VGG-19's Gatys step at 400fdad (style_transfer_bench: forward to conv5_1, losses, the
# backward with frozen weights) of this commit against 7636c9f's binary,
# alternated, 3 rounds, NHWC, fp32 and bf16; both binaries' defaults.
# Usage: bash gatys.sh <base style_transfer_bench> <new style_transfer_bench> > gatys.txt
BASE=${1:?base binary}
NEW=${2:?new binary}
date -u
for round in 1 2 3; do
  for prec in fp32 bf16; do
    for which in base new; do
      B=$BASE; [ $which = new ] && B=$NEW
      echo "== round $round precision $prec binary $which"
      OMP_NUM_THREADS=2 "$B" --format nhwc --precision $prec --reps 5 --warmup 1 2>&1
    done
  done
done
date -u
