#!/usr/bin/env bash
# Gatys step side by side: style_transfer_bench built at 450fe42 (Gram
# products in float) and a later build (540b8b9 in the first try, 3763a35
# with a stale reuse of G - A, 6bd77b6: the fix;
# in bf16 with --precision bf16, F rounded once, no zeroing of the taps),
# alternated with the order swapped every round, 3 rounds, 2 OpenMP threads,
# bf16 then fp32 (fp32 differs only by the taps no longer zeroed).
#   bash run.sh <old style_transfer_bench> <new style_transfer_bench>
set -eu
old=$1 new=$2
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%FT%TZ), loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
for prec in bf16 fp32; do
  for round in 1 2 3; do
    if [ $((round % 2)) = 1 ]; then order="old new"; else order="new old"; fi
    for w in $order; do
      bin=$old; [ $w = new ] && bin=$new
      echo "-- $prec round $round $w ($bin)"
      OMP_NUM_THREADS=2 "$bin" --format nhwc --reps 5 --warmup 2 --precision $prec | grep -E "iteration|losses forward|frozen\)"
    done
  done
done
