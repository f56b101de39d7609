#!/usr/bin/env bash
# ResNet-20/56 inference at batch 100, NHWC, 2 threads: cifarnet_bench
# built at 048a711 and at 66adc5c, alternated, 2 rounds, with the layers
# running themselves (--plan-executor 0: the folded conv + batch norm takes
# Winograd under Auto, the own kernels at 66adc5c on AVX2) and with the
# default plan executor (its convolutions direct at both).
#   bash run_infer.sh <old cifarnet_bench> <new cifarnet_bench>
set -eu
old=$1 new=$2
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%FT%TZ), loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
for pe in 0 1; do
  for round in 1 2; do
    for w in old new; do
      bin=$old; [ $w = new ] && bin=$new
      echo "-- --plan-executor $pe round $round $w ($bin)"
      OMP_NUM_THREADS=2 "$bin" --only infer20,infer56 --formats nhwc --reps 5 --plan-executor $pe | grep -E "^infer(20|56) "
    done
  done
done
