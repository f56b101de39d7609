#!/bin/bash
# One binary (the commit this directory came with), its own kernels for
# ConvBatchNorm's backward on and off (--direct-conv-bn 1 / 0), alternated,
# ResNet-20 fp32 with per-layer profiles, then ResNet-56 without.
cd "$(git rev-parse --show-toplevel)"
date -u; lscpu | grep -E "Model name|^CPU\(s\)"; git rev-parse --short HEAD
for r in 1 2 3 4; do
  for d in 0 1; do
    echo "=== resnet20 round $r: --direct-conv-bn $d"
    OMP_NUM_THREADS=2 build/bench/cifarnet_bench --only resnet20 --formats nhwc --precision fp32 --reps 7 --steps 4 --warmup 10 --profile 1 --direct-conv-bn $d 2>&1
  done
done
for r in 1 2 3; do
  for d in 0 1; do
    echo "=== resnet56 round $r: --direct-conv-bn $d"
    OMP_NUM_THREADS=2 build/bench/cifarnet_bench --only resnet56 --formats nhwc --precision fp32 --reps 7 --steps 4 --warmup 10 --profile 0 --direct-conv-bn $d 2>&1
  done
done
date -u
