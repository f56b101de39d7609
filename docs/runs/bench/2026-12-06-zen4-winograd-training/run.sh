#!/bin/bash
# The records of this directory (docs/BENCHMARKS.md, 2026-12-06 06:50): fp32
# training with --conv-algorithm winograd against direct, one binary, the two
# alternated (ab_training.txt), and the kernels alone (probes/).
set -euo pipefail
build=${1:-build}
for r in 1 2 3 4 5 6; do
  for a in direct winograd; do
    echo "round $r $a"
    OMP_NUM_THREADS=2 "$build/bench/cifarnet_bench" --only resnet20,resnet56 --formats nhwc --precision fp32 \
      --conv-algorithm "$a" --profile 0 --reps 5 | grep 'batch 128'
  done
done
dir=$(cd "$(dirname "$0")" && pwd)
c++ -I "$dir/../../../../include" -isystem /usr/include/eigen3 -O3 -DNDEBUG -fopenmp -march=native \
  -o /tmp/winograd_bn "$dir/probes/winograd_bn.cpp" -ldnnl
OMP_NUM_THREADS=2 /tmp/winograd_bn 5 1
