#!/usr/bin/env bash
# Side by side on one machine, 2 threads: 05a30f2's cifarnet_bench (before)
# and this tree's (bn_output_into_next_conv in bf16: the own AMX forward
# with the batch norm's map as its prologue), and this tree's with
# --rules-off bn_output_into_next_conv; ResNet-20 and ResNet-56, bf16,
# NHWC, 3 rounds with the order rotated each round; then one per-layer
# profile of ResNet-20 with the rule and without it.
#   bash run.sh <before-bin-dir> <after-bin-dir> > side_by_side.txt
set -euo pipefail
A=$1 B=$2
export OMP_NUM_THREADS=2
date -u; lscpu | grep -E 'Model name|^CPU family|^Model:'
run() {
  case $1 in
    old) "$A/cifarnet_bench" --only resnet20,resnet56 --formats nhwc --precision bf16 --profile 0 ;;
    new) "$B/cifarnet_bench" --only resnet20,resnet56 --formats nhwc --precision bf16 --profile 0 ;;
    off) "$B/cifarnet_bench" --only resnet20,resnet56 --formats nhwc --precision bf16 --profile 0 \
           --rules-off bn_output_into_next_conv ;;
  esac
}
for round in 1 2 3; do
  case $round in 1) order="old new off" ;; 2) order="new off old" ;; 3) order="off old new" ;; esac
  for v in $order; do echo "== round $round: $v"; run $v | grep -E 'img/s'; done
done
echo "== profile, new"
"$B/cifarnet_bench" --only resnet20 --formats nhwc --precision bf16 --reps 5
echo "== profile, new with --rules-off bn_output_into_next_conv"
"$B/cifarnet_bench" --only resnet20 --formats nhwc --precision bf16 --reps 5 --rules-off bn_output_into_next_conv
date -u
