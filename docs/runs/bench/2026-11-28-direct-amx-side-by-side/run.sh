#!/bin/bash
# Side by side, alternated: ef4695e's cifarnet_bench (base; the library is
# unchanged up to 11b6196) and the own backward kernels with batch norm's
# input gradient in their prologue (direct: the tree of the commit this
# directory came with), ResNet-20 fp32 with per-layer profiles, then
# ResNet-56 without.
cd /work/scratch
date -u; lscpu | grep -E "Model name|^CPU\(s\)"
for r in 1 2 3 4; do
  for b in base direct; do
    echo "=== resnet20 round $r: $b"
    OMP_NUM_THREADS=2 ./bench_$b --only resnet20 --formats nhwc --precision fp32 --reps 7 --steps 4 --warmup 10 --profile 1 2>&1
  done
done
for r in 1 2 3; do
  for b in base direct; do
    echo "=== resnet56 round $r: $b"
    OMP_NUM_THREADS=2 ./bench_$b --only resnet56 --formats nhwc --precision fp32 --reps 7 --steps 4 --warmup 10 --profile 0 2>&1
  done
done
date -u
