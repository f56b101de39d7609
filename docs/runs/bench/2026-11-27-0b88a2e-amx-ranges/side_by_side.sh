#!/bin/bash
# ResNet-20 fp32 training, ad05f73's cifarnet_bench (before) against 0b88a2e's
# (ConvBatchNorm's backward in ranges of images) at its default ranges (1 MiB)
# and with --conv-bn-chunk-kib 0 (whole batches), alternated, three rounds.
# Run from the directory holding both checkouts: base/ (ad05f73) and main/ (0b88a2e).
for r in 1 2 3; do
  echo "=== round $r $(date -u +%H:%M:%S)"
  echo "--- ad05f73"
  OMP_NUM_THREADS=2 base/build/bench/cifarnet_bench --only resnet20 --formats nhwc --precision fp32 --reps 7 --steps 4 --warmup 10 --profile 1
  echo "--- 0b88a2e (default: 1 MiB ranges)"
  OMP_NUM_THREADS=2 main/build/bench/cifarnet_bench --only resnet20 --formats nhwc --precision fp32 --reps 7 --steps 4 --warmup 10 --profile 1
  echo "--- 0b88a2e --conv-bn-chunk-kib 0"
  OMP_NUM_THREADS=2 main/build/bench/cifarnet_bench --only resnet20 --formats nhwc --precision fp32 --reps 7 --steps 4 --warmup 10 --conv-bn-chunk-kib 0 --profile 1
done
