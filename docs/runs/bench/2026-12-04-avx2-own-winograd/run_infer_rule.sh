#!/usr/bin/env bash
# ResNet-20/56 inference at batch 100 (and 1), NHWC, 2 threads, through the
# plan executor: cifarnet_bench built at 048a711 (no conv_winograd_epilogue;
# its inference equals 66adc5c's, infer.txt)
# and with the rule, alternated, 3 rounds; then the new binary with the rule
# turned off once (--rules-off conv_winograd_epilogue).
#   bash run_infer_rule.sh <old cifarnet_bench> <new cifarnet_bench>
set -eu
old=$1 new=$2
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%FT%TZ), loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
for batch in 100 1; do
  for round in 1 2 3; do
    if [ $((round % 2)) = 1 ]; then order="old new"; else order="new old"; fi
    for w in $order; do
      bin=$old; [ $w = new ] && bin=$new
      echo "-- batch $batch round $round $w ($bin)"
      OMP_NUM_THREADS=2 "$bin" --only infer20,infer56 --formats nhwc --reps 5 --infer-batch $batch | grep -E "^infer(20|56) "
    done
  done
done
echo "-- batch 100, new with --rules-off conv_winograd_epilogue ($new)"
OMP_NUM_THREADS=2 "$new" --only infer20,infer56 --formats nhwc --reps 5 --rules-off conv_winograd_epilogue | grep -E "^infer(20|56) "
