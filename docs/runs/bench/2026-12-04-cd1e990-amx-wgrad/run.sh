#!/usr/bin/env bash
# Side by side on one machine: the binaries of db152db (before) and cd1e990
# (the AMX weight gradient's blocks and padded input channels), alternated
# with the order swapped every round; two threads each.
#   bash run.sh <before-bin-dir> <after-bin-dir> > side_by_side.txt
set -euo pipefail
A=$1 B=$2
export OMP_NUM_THREADS=2
date -u; lscpu | grep -E 'Model name|Flags' | sed 's/Flags:.*\(amx[a-z0-9_ ]*\).*/Flags: ... \1 .../'
echo "== conv_passes_bench --net airbench --batch 500 --reps 5"
for r in 1 2; do
  for bin in $A $B; do echo "-- $bin"; $bin/conv_passes_bench --net airbench --batch 500 --reps 5 | grep -E '^[0-9]'; done
done
for round in 1 2 3; do
  if [ $((round % 2)) = 1 ]; then order="$A $B"; else order="$B $A"; fi
  for bin in $order; do
    echo "== round $round $bin"
    $bin/cifarnet_bench --only airbench,resnet20,resnet56 --formats nhwc --precision bf16 | grep -E 'img/s'
  done
done
date -u
