#!/usr/bin/env bash
# Gatys step side by side: style_transfer_bench built at 048a711 (on AVX2,
# Winograd chosen by Auto but refused by oneDNN: its direct kernel) and at
# the commit adding the own Winograd F(4x4, 3x3) kernels, alternated with
# the order swapped every round, 3 rounds, 2 OpenMP threads, fp32, NHWC;
# then the new binary with --conv-algorithm direct once (the same code
# without Winograd).
#   bash run.sh <old style_transfer_bench> <new style_transfer_bench>
set -eu
old=$1 new=$2
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%FT%TZ), loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
for round in 1 2 3; do
  if [ $((round % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for w in $order; do
    bin=$old; [ $w = new ] && bin=$new
    echo "-- fp32 round $round $w ($bin)"
    OMP_NUM_THREADS=2 "$bin" --format nhwc --reps 5 --warmup 2 --precision fp32 | grep -E "iteration|losses forward|frozen\)|conv5_1"
  done
done
echo "-- fp32 new, --conv-algorithm direct ($new)"
OMP_NUM_THREADS=2 "$new" --format nhwc --reps 5 --warmup 2 --precision fp32 --conv-algorithm direct | grep -E "iteration|losses forward|frozen\)|conv5_1"
