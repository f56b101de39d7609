#!/bin/bash
# More rounds of fp32 ResNet-20 training (the own direct kernels' prologue
# computes the batch norm's input gradient with the constants): OLD and NEW
# binaries alternated. Usage: run_fp32.sh OLD_BINARY NEW_BINARY
old=$1 new=$2
date -u
for r in 1 2 3 4 5 6 7 8 9 10; do
  for b in "$old" "$new"; do
    echo "== round $r $b fp32"
    "$b" --only resnet20 --formats nhwc --precision fp32 --reps 7 --profile 0 | grep "img/s"
  done
done
date -u
