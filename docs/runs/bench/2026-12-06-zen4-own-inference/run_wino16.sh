#!/usr/bin/env bash
# ResNet's 16-channel stage in inference on Zen 4: the own direct kernel
# (binary A: Winograd from 32 channels) against the own Winograd kernels
# (binary B: Winograd from 16 channels), both with the per-thread Winograd
# blocks; alternated, ROUNDS rounds, fp32 NHWC, batch 100 and 1.
# Usage: bash run_wino16.sh <cifarnet_bench A> <cifarnet_bench B> > out.txt
set -euo pipefail
A=$1
B=$2
ROUNDS=${ROUNDS:-5}
lscpu | grep -E 'Model name|^CPU family|^Model:'
echo "A=$A B=$B rounds $ROUNDS, $(date -u)"
for r in $(seq "$ROUNDS"); do
  for batch in 100 1; do
    for c in A B; do
      bin=$A
      [ "$c" = B ] && bin=$B
      OMP_NUM_THREADS=2 "$bin" --only infer20,infer56 --formats nhwc --precision fp32 --reps 7 \
        --infer-batch "$batch" --profile 0 2>&1 | awk -v r="$r" -v c="$c" -v b="$batch" \
        '/^infer/ {printf "round %d batch %3d %s %s %s img/s %s\n", r, b, c, $1, $5, $7 $8 $9}'
    done
  done
done
echo "finished $(date -u)"
