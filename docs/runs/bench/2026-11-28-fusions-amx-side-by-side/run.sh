#!/bin/bash
# Side by side, alternated: ca85796's cifarnet_bench (base: the session's
# start, the own backward kernels with batch norm's input gradient in their
# prologue) and 63edbc5's (new: the batch norm sums and the residual sum in
# the kernels' epilogue, the statistics in the own forward kernel's epilogue,
# the first batch norm's output left to the next kernels, the shortcut's
# pool written into the pad in place and its gradient formed in the sum),
# ResNet-20 fp32 with per-layer profiles, then ResNet-56 without; then the
# new binary with the own kernels and hand-overs off and on
# (--direct-conv-bn 0|1).
cd /work/scratch
date -u; lscpu | grep -E "Model name|^CPU\(s\)"
for r in 1 2 3 4; do
  for b in base new; do
    echo "=== resnet20 round $r: $b"
    OMP_NUM_THREADS=2 ./bench_$b --only resnet20 --formats nhwc --precision fp32 --reps 7 --steps 4 --warmup 10 --profile 1 2>&1
  done
done
for r in 1 2 3; do
  for b in base new; do
    echo "=== resnet56 round $r: $b"
    OMP_NUM_THREADS=2 ./bench_$b --only resnet56 --formats nhwc --precision fp32 --reps 7 --steps 4 --warmup 10 --profile 0 2>&1
  done
done
for r in 1 2 3; do
  for d in 0 1; do
    echo "=== resnet20 round $r: new --direct-conv-bn $d"
    OMP_NUM_THREADS=2 ./bench_new --only resnet20 --formats nhwc --precision fp32 --reps 7 --steps 4 --warmup 10 --profile 1 --direct-conv-bn $d 2>&1
  done
done
date -u
