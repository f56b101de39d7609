#!/usr/bin/env bash
# Side by side: the cifarnet_bench of BASE (6bcc3fd, copied before the
# change) against NEW (this commit's tree), the order swapped each round;
# ResNet-20 and ResNet-56, bf16 and fp32, then one per-layer profile of each
# binary (bf16 ResNet-20: the optimizer and stage2/block0/conv1's backward).
#   bash run.sh <base cifarnet_bench> <new cifarnet_bench> > side_by_side.txt
set -euo pipefail
BASE=$1
NEW=$2
export OMP_NUM_THREADS=2
date -u
lscpu | grep -E 'Model name|^CPU family|^Model:'
run() {  # run <binary> <net> <precision>
  "$1" --only "$2" --formats nhwc --precision "$3" --reps 7 --steps 4 --warmup 10 --profile 0 | grep -E "^$2 "
}
for round in 1 2 3 4; do
  for prec in bf16 fp32; do
    for net in resnet56 resnet20; do
      if [ $((round % 2)) = 1 ]; then order="BASE NEW"; else order="NEW BASE"; fi
      for who in $order; do
        bin=$BASE
        [ "$who" = NEW ] && bin=$NEW
        echo "round $round $prec $who $(run "$bin" "$net" "$prec")"
      done
    done
  done
done
for who in BASE NEW; do
  bin=$BASE
  [ "$who" = NEW ] && bin=$NEW
  for net in resnet20 resnet56; do
    echo "== profile $who $net bf16"
    "$bin" --only "$net" --formats nhwc --precision bf16 --reps 3 --steps 6 --warmup 5 --profile 1 |
      grep -E "img/s|optimizer|stage2/block0/conv1 |per kind"
  done
done
date -u
