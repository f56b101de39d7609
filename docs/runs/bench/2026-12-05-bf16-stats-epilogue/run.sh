#!/usr/bin/env bash
# Side by side in one cifarnet_bench binary: bf16 training with
# bn_stats_in_conv_epilogue on (the default) and off (--rules-off
# bn_stats_in_conv_epilogue: the batch norm's own pass of the statistics,
# as before this change), the order swapped each round; then one per-layer
# profile each way (the block's second batch norm's forward).
#   bash run.sh <cifarnet_bench> > side_by_side.txt
set -euo pipefail
BIN=$1
export OMP_NUM_THREADS=2
date -u
lscpu | grep -E 'Model name|^CPU family|^Model:'
git -C "$(dirname "$0")" rev-parse --short HEAD
run() {  # run <net> <on|off>
  local off=()
  [ "$2" = off ] && off=(--rules-off bn_stats_in_conv_epilogue)
  "$BIN" --only "$1" --formats nhwc --precision bf16 --reps 7 --steps 4 --warmup 10 --profile 0 "${off[@]}" |
    grep -E "^$1 "
}
for round in 1 2 3 4; do
  for net in resnet56 resnet20; do
    if [ $((round % 2)) = 1 ]; then order="off on"; else order="on off"; fi
    for who in $order; do
      echo "round $round bf16 $who $(run "$net" "$who")"
    done
  done
done
for who in off on; do
  off=()
  [ "$who" = off ] && off=(--rules-off bn_stats_in_conv_epilogue)
  echo "== profile $who resnet20 bf16"
  "$BIN" --only resnet20 --formats nhwc --precision bf16 --reps 3 --steps 6 --warmup 5 --profile 1 "${off[@]}" |
    grep -E "img/s|/bn2 |/conv2 |per kind"
done
date -u
