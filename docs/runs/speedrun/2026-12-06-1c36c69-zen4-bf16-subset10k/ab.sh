#!/usr/bin/env bash
# e26d5bd's cifar10_speedrun (a worktree build) against this tree's, bf16,
# 10,000 images, 1 epoch, seed 0, alternated ROUNDS times.
# Usage: OLD=<e26d5bd's cifar10_speedrun> bash ab.sh <build dir> <out dir>
set -euo pipefail
BUILD=${1:?build dir}
OUT=${2:?out dir}
OLD=${OLD:?e26d5bd cifar10_speedrun}
DATA=${DATA:-../shared/data/cifar-10-batches-bin}
for r in $(seq 1 "${ROUNDS:-3}"); do
  for which in old new; do
    prog="$BUILD/examples/cifar10_speedrun/cifar10_speedrun"
    [ "$which" = old ] && prog="$OLD"
    OMP_NUM_THREADS=2 "$prog" --data-dir "$DATA" --subset 10000 --epochs 1 --runs 1 --precision bf16 --seed 0 \
      --json "$OUT/ab_${which}_r$r.json" > "$OUT/ab_${which}_r$r.log" 2>&1
  done
done
