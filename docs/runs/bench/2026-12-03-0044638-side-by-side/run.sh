#!/bin/bash
# The step plan with its rules in one place (0044638: rules turnable off,
# the layers' oneDNN specializations, airbench94's bf16_copy_to_readers with
# GELU, pool_bf16_dx_to_conv, conv_bf16_output_to_pool,
# bn_bf16_dx_to_standalone_conv, gradient buffers from lifetimes) against
# 7636c9f's binary (the layer tree's RunContext side channels, the issue's
# starting point), alternated, 3 rounds, one session:
# ResNet-20 and ResNet-56 training in fp32 and bf16, airbench94's step in
# bf16 (NHWC). Both binaries run their defaults.
# Usage: bash run.sh <base cifarnet_bench> <new cifarnet_bench> > side_by_side.txt
BASE=${1:?base binary}
NEW=${2:?new binary}
lscpu | grep -E "Model name" ; grep -o -w 'amx_bf16\|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
date -u
for round in 1 2 3; do
  for prec in fp32 bf16; do
    for which in base new; do
      B=$BASE; [ $which = new ] && B=$NEW
      echo "== round $round precision $prec binary $which"
      OMP_NUM_THREADS=2 "$B" --only resnet20,resnet56 --formats nhwc --precision $prec --reps 5 --steps 3 \
        --warmup 2 --profile 0 2>&1 | grep -E "img/s|peak"
    done
  done
  for which in base new; do
    B=$BASE; [ $which = new ] && B=$NEW
    echo "== round $round precision bf16 binary $which"
    OMP_NUM_THREADS=2 "$B" --only airbench --formats nhwc --precision bf16 --reps 5 --steps 2 --warmup 1 \
      --profile 0 2>&1 | grep -E "img/s|peak"
  done
done
date -u
