#!/bin/bash
# The layer tree (--plan-training 0) against the training executor
# (--plan-training 1) in one binary, alternated, 3 rounds: ResNet-20 and
# ResNet-56 training in fp32 and bf16, airbench94's step in bf16 (NHWC).
# Usage: bash run.sh <cifarnet_bench binary> > side_by_side.txt
B=${1:-build/bench/cifarnet_bench}
lscpu | grep -E "Model name|Flags" | sed 's/Flags:.*amx_bf16.*/Flags: ... amx_bf16 amx_tile ... (AMX)/'
date -u
for round in 1 2 3; do
  for prec in fp32 bf16; do
    for t in 0 1; do
      echo "== round $round precision $prec plan-training $t"
      OMP_NUM_THREADS=2 "$B" --only resnet20,resnet56 --formats nhwc --precision $prec --reps 5 --steps 3 \
        --warmup 2 --profile 0 --plan-training $t 2>&1 | grep -E "img/s|peak"
    done
  done
  for t in 0 1; do
    echo "== round $round precision bf16 plan-training $t"
    OMP_NUM_THREADS=2 "$B" --only airbench --formats nhwc --precision bf16 --reps 5 --steps 2 --warmup 1 \
      --profile 0 --plan-training $t 2>&1 | grep -E "img/s|peak"
  done
done
date -u
