#!/usr/bin/env bash
# The per-step weight packing shared among the threads (amx::Forward3x3::
# set_weights, onednn::FlippedWeights::update): BASE (e95377e's
# cifarnet_bench, copied before the change) against NEW, bf16 ResNet-56 and
# ResNet-20, the order swapped each round; then `perf record` of each
# binary's ResNet-56 bf16 step and, by thread, the samples in the packing
# code (packing_samples.py): the main thread's share is time the other
# thread waits.
#   bash run.sh <base cifarnet_bench> <new cifarnet_bench> > side_by_side.txt
set -euo pipefail
BASE=$1
NEW=$2
HERE=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=2
date -u
lscpu | grep -E 'Model name|^CPU family|^Model:'
run() {  # run <binary> <net>
  "$1" --only "$2" --formats nhwc --precision bf16 --reps 7 --steps 4 --warmup 10 --profile 0 | grep -E "^$2 "
}
for round in 1 2 3 4; do
  for net in resnet56 resnet20; do
    if [ $((round % 2)) = 1 ]; then order="BASE NEW"; else order="NEW BASE"; fi
    for who in $order; do
      bin=$BASE
      [ "$who" = NEW ] && bin=$NEW
      echo "round $round bf16 $who $(run "$bin" "$net")"
    done
  done
done
for who in BASE NEW; do
  bin=$BASE
  [ "$who" = NEW ] && bin=$NEW
  echo "== perf $who"
  perf record -q -g -o /tmp/packing_$who.data "$bin" --only resnet56 --formats nhwc --precision bf16 \
    --reps 5 --steps 4 --warmup 3 --profile 0 2>&1 | grep -E "^resnet56 "
  perf script -i /tmp/packing_$who.data -F tid,time,ip,sym,dso 2>/dev/null > /tmp/packing_$who.txt
  python3 "$HERE/packing_samples.py" /tmp/packing_$who.txt
done
date -u
