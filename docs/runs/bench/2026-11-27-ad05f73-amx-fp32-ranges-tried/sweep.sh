#!/bin/bash
# A/B of ConvBatchNorm's ranged backward: base binary (ad05f73) and the new one at several range sizes.
cd /work
for r in 1 2 3; do
  echo "=== round $r $(date -u +%H:%M:%S)"
  echo "--- base ad05f73"
  OMP_NUM_THREADS=2 base/build/bench/cifarnet_bench --only resnet20 --formats nhwc --precision fp32 --reps 7 --steps 4 --warmup 8 --profile 1 2>&1 | grep -E "img/s|per kind|booked"
  for k in 0 512 1024 2048; do
    echo "--- new --conv-bn-chunk-kib $k"
    OMP_NUM_THREADS=2 main/build/bench/cifarnet_bench --only resnet20 --formats nhwc --precision fp32 --reps 7 --steps 4 --warmup 8 --conv-bn-chunk-kib $k --profile 1 2>&1 | grep -E "img/s|per kind|booked"
  done
done
