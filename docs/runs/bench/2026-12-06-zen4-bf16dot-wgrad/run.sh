#!/usr/bin/env bash
# The own AVX512-BF16 weight gradient (bf16_wgrad.hpp) against oneDNN's bf16
# (and, for strided convolutions, float) weight gradient on the Zen 4 EPYC,
# nothing else running. Two comparisons, each alternated over 3 rounds:
#  1. the passes alone: conv_passes_bench of the new build, the op's default
#     (the own kernel, 'd') against --onednn-weights (oneDNN's kernels), at
#     airbench94's shapes (batch 500) and ResNet-20's (batch 128);
#  2. whole training steps: cifarnet_bench --precision bf16 of e26d5bd (the
#     commit before the kernel; OLD) against the new build, ResNet-20 and
#     ResNet-56 training and airbench94 (NHWC).
# Usage: [ROUNDS=3] OLD=<e26d5bd's cifarnet_bench> bash run.sh <build dir> <out dir>
set -euo pipefail
BUILD=${1:?build dir}
OUT=${2:?out dir}
OLD=${OLD:?e26d5bd cifarnet_bench}
export OMP_NUM_THREADS=2
for r in $(seq 1 ${ROUNDS:-3}); do
  for mode in own onednn; do
    flag=""
    [ "$mode" = onednn ] && flag="--onednn-weights"
    "$BUILD/bench/conv_passes_bench" --net airbench --batch 500 --reps 5 $flag > "$OUT/passes_airbench_${mode}_r$r.txt"
    "$BUILD/bench/conv_passes_bench" --net resnet --batch 128 --reps 7 $flag > "$OUT/passes_resnet_${mode}_r$r.txt"
  done
done
for r in $(seq 1 ${ROUNDS:-3}); do
  for which in old new; do
    bin="$BUILD/bench/cifarnet_bench"
    [ "$which" = old ] && bin="$OLD"
    "$bin" --only resnet20,resnet56,airbench --formats nhwc --precision bf16 --reps 5 --profile 0 \
      > "$OUT/steps_${which}_r$r.txt"
  done
done
