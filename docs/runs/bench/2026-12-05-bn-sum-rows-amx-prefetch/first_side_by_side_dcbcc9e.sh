#!/usr/bin/env bash
# Side by side: 6e1c09a's cifarnet_bench (old) against this tree's (new: the
# batch norm's residual-sum pass in AVX-512 registers), rotated, bf16, NHWC.
set -u
OLD=${OLD:-/work/bin_s11_old} NEW=${NEW:-/work/bin_s11_a}
for net in resnet56 resnet20; do
  for r in 1 2 3; do
    for b in old new; do
      bin=$OLD; [ $b = new ] && bin=$NEW
      echo "== $net round $r $b"
      OMP_NUM_THREADS=2 $bin --only $net --formats nhwc --precision bf16 --reps 7 --steps 4 --warmup 5 --profile 1 2>&1 |
        grep -E "img/s|per kind|stage1/block0/bn2 |stage2/block1/bn2 |stage3/block1/bn2 "
    done
  done
done
