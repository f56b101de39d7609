#!/bin/bash
# Side by side: the binary before the change (OLD, built from 1626d3a) and
# after it (NEW), alternated: ResNet-20/-56 training in bf16 (the batch
# norm's input gradient, bn::input_gradient) and fp32 (the own direct
# kernels' prologue, direct_conv.hpp), and ResNet-20's stem pass
# (input_gradient_into_weight_gradient) inside the bf16 step.
# Usage: run.sh OLD_BINARY NEW_BINARY
old=$1 new=$2
date -u; lscpu | grep -E "Model name|^Model:"
for r in 1 2 3 4 5 6; do
  for b in "$old" "$new"; do
    echo "== round $r $b bf16"
    "$b" --only resnet20,resnet56 --formats nhwc --precision bf16 --reps 7 --profile 0 | grep "img/s"
    echo "== round $r $b fp32"
    "$b" --only resnet20 --formats nhwc --precision fp32 --reps 5 --profile 0 | grep "img/s"
  done
done
date -u
