#!/bin/bash
# Side by side: the previous binary (a worktree of HEAD before the change,
# built as `cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release`) and
# this one, alternated. Usage: run.sh OLD_BUILD NEW_BUILD
old=$1 new=$2
lscpu | grep -E "Model name|Flags" | cut -c1-200
for r in 1 2 3 4; do
  for b in "$old" "$new"; do
    echo "== round $r $b conv_passes_bench --reps 21"
    "$b/bench/conv_passes_bench" --reps 21 | grep "@"
  done
done
for r in 1 2; do
  for b in "$old" "$new"; do
    echo "== round $r $b conv_passes_bench --net airbench --batch 500 --reps 7"
    "$b/bench/conv_passes_bench" --net airbench --batch 500 --reps 7 | grep "@"
  done
done
for r in 1 2 3 4 5 6 7 8; do
  for b in "$old" "$new"; do
    echo "== round $r $b cifarnet_bench --only resnet20,resnet56 --formats nhwc --precision bf16 --reps 7 --profile 0"
    "$b/bench/cifarnet_bench" --only resnet20,resnet56 --formats nhwc --precision bf16 --reps 7 --profile 0 | grep "img/s"
  done
done
