#!/usr/bin/env bash
# The side-by-side runs of this directory (2026-11-27 23:11-23:22 UTC).
# Binaries: cifarnet_bench of 420408a (before), 9b3340c (the residual
# block's backward sum in ConvBatchNorm's ranges) and "ab" (9b3340c plus
# range_sums_tried.patch: batch norm's backward sums taken by the next
# layer's ranges, tried and not committed), each built Release with
# -march=native (cmake -DCIFARNET_CUDA=OFF -DCIFARNET_BUILD_TESTS=OFF
# -DCIFARNET_BUILD_EXAMPLES=OFF), copied to /work/scratch/bench_<name>.
for r in 1 2 3 4; do for b in 420408a 9b3340c ab; do echo "=== round $r $b"
  OMP_NUM_THREADS=2 /work/scratch/bench_$b --only resnet20 --formats nhwc --precision fp32 \
    --reps 7 --steps 4 --warmup 10 --profile 1 2>&1 | grep -E "img/s|per kind|booked"
done; done > side_by_side_profile.txt
for r in 1 2 3 4 5 6; do for b in 420408a 9b3340c ab; do echo "=== round $r $b"
  OMP_NUM_THREADS=2 /work/scratch/bench_$b --only resnet20 --formats nhwc --precision fp32 \
    --reps 9 --steps 4 --warmup 10 --profile 0 2>&1 | grep -E "img/s"
done; done > side_by_side_images.txt
