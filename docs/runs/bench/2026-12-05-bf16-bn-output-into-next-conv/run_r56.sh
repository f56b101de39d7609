#!/usr/bin/env bash
# ResNet-56 bf16 alone, more repetitions: 05a30f2's cifarnet_bench against
# this tree's, and this tree's with --rules-off bn_output_into_next_conv,
# 4 rounds, the order rotated each round; 2 threads.
#   bash run_r56.sh <before-bin-dir> <after-bin-dir> > r56.txt
set -euo pipefail
A=$1 B=$2
export OMP_NUM_THREADS=2
date -u; lscpu | grep -E 'Model name|^CPU family|^Model:'
run() {
  case $1 in
    old) "$A/cifarnet_bench" --only resnet56 --formats nhwc --precision bf16 --profile 0 --reps 7 ;;
    new) "$B/cifarnet_bench" --only resnet56 --formats nhwc --precision bf16 --profile 0 --reps 7 ;;
    off) "$B/cifarnet_bench" --only resnet56 --formats nhwc --precision bf16 --profile 0 --reps 7 \
           --rules-off bn_output_into_next_conv ;;
  esac
}
for round in 1 2 3 4; do
  case $round in 1) order="old new off" ;; 2) order="new off old" ;; 3) order="off old new" ;; 4) order="new old off" ;; esac
  for v in $order; do echo "== round $round: $v"; run $v | grep -E 'img/s'; done
done
date -u
