#!/usr/bin/env bash
# Side by side: one cifarnet_bench binary with the huge-page advice off
# (--huge-pages 0, the allocation of every earlier commit but the 2 MiB
# alignment) and on (--huge-pages 1, the default), the order swapped each
# round; ResNet-20 and ResNet-56 training in bf16 and fp32, then inference;
# then each mode's AnonHugePages while a bf16 ResNet-56 step runs.
#   bash run.sh <cifarnet_bench> > side_by_side.txt
set -euo pipefail
BIN=$1
export OMP_NUM_THREADS=2
date -u
lscpu | grep -E 'Model name|^CPU family|^Model:'
cat /sys/kernel/mm/transparent_hugepage/enabled
git -C "$(dirname "$0")" rev-parse --short HEAD
run() {  # run <net> <precision> <huge 0|1>
  "$BIN" --only "$1" --formats nhwc --precision "$2" --reps 7 --steps 4 --warmup 10 --profile 0 --huge-pages "$3" |
    grep -E "^$1 |^peak|^huge" | tr '\n' ' '
}
for round in 1 2 3 4; do
  for prec in bf16 fp32; do
    for net in resnet56 resnet20 infer56 infer20; do
      if [ $((round % 2)) = 1 ]; then order="0 1"; else order="1 0"; fi
      for h in $order; do
        echo "round $round $prec huge=$h $(run "$net" "$prec" "$h")"
      done
    done
  done
done
for h in 0 1; do
  "$BIN" --only resnet56 --formats nhwc --precision bf16 --reps 60 --steps 4 --warmup 5 --profile 0 --huge-pages "$h" \
    > /tmp/hp_rss_$h.txt 2>&1 &
  pid=$!
  sleep 15
  echo "huge=$h while running: $(grep -E 'Rss|AnonHugePages' /proc/$pid/smaps_rollup | tr -s ' ' | tr '\n' ' ')"
  wait $pid
  echo "huge=$h $(grep -E '^resnet56|^peak|^huge' /tmp/hp_rss_$h.txt | tr '\n' ' ')"
done
date -u
