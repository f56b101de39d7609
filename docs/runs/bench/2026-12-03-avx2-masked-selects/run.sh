#!/usr/bin/env bash
# Training and inference side by side on an AVX2 CPU, three builds of
# cifarnet_bench: b9241e6 (the masked passes' selects compiled as branches,
# not vectorized on AVX2; oneDNN's kernels for every convolution), d7f922b
# (the selects as host::keep_if, AVX2 positive_bits / add_masked_word) and
# 7bd2e8b (the own convolution kernels in AVX2 too, batch norm's passes in
# their prologue and epilogue); alternated with the order rotated every
# round, 3 rounds, 2 OpenMP threads, ResNet-20 and ResNet-56 training
# (batch 128) and inference (batch 100), NHWC fp32.
#   bash run.sh <b9241e6 cifarnet_bench> <d7f922b cifarnet_bench> <7bd2e8b cifarnet_bench>
set -eu
bins=("$1" "$2" "$3")
names=(b9241e6 d7f922b 7bd2e8b)
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%FT%TZ), loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
for round in 0 1 2; do
  for k in 0 1 2; do
    i=$(((k + round) % 3))
    echo "-- round $((round + 1)) ${names[$i]} (${bins[$i]})"
    OMP_NUM_THREADS=2 "${bins[$i]}" --only resnet20,resnet56,infer20,infer56 --formats nhwc --reps 5 --warmup 3 --profile 0 | grep "img/s"
  done
done
