#!/usr/bin/env bash
# Side by side: the bench of ea0ed7d (base: inference by the layer tree) and of the plan executor's commit
# (new), alternated (the order swapped every round), 3 rounds, 2 threads, nothing else running.
# base: /work/r20src (a worktree at ea0ed7d), build/bench/{cifarnet_bench,style_transfer_bench}; new: /work/main's build.
BASE=${BASE:-/work/r20src/build/bench}
NEW=${NEW:-/work/main/build/bench}
OUT=${OUT:-/work/main/docs/runs/bench/2026-12-02-executor-side-by-side/run.txt}
{
echo "# $(date -u); CPU: $(lscpu | grep 'Model name' | sed 's/ \+/ /g'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2) model $(grep -m1 '^model' /proc/cpuinfo | cut -d: -f2), flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_tile|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "# base: $BASE (ea0ed7d); new: $NEW ($(git -C /work/main rev-parse --short HEAD))"
for round in 1 2 3; do
  order="base new"; [ $((round % 2)) = 0 ] && order="new base"
  for prec in fp32 bf16; do
    for which in $order; do
      B=$BASE; [ $which = new ] && B=$NEW
      echo "## round $round $prec $which: OMP_NUM_THREADS=2 $B/cifarnet_bench --only resnet20,resnet56,infer20,infer56 --formats nhwc --precision $prec --profile 0 --warmup 10"
      OMP_NUM_THREADS=2 $B/cifarnet_bench --only resnet20,resnet56,infer20,infer56 --formats nhwc --precision $prec --profile 0 --warmup 10 2>&1 | grep -E "img/s"
    done
  done
  for which in $order; do
    B=$BASE; [ $which = new ] && B=$NEW
    echo "## round $round bf16 $which: OMP_NUM_THREADS=2 $B/cifarnet_bench --only airbench --formats nhwc --precision bf16 --profile 0 --warmup 3"
    OMP_NUM_THREADS=2 $B/cifarnet_bench --only airbench --formats nhwc --precision bf16 --profile 0 --warmup 3 2>&1 | grep -E "img/s"
    echo "## round $round bf16 $which: OMP_NUM_THREADS=2 $B/style_transfer_bench --format nhwc --reps 5 --warmup 2 --precision bf16"
    OMP_NUM_THREADS=2 $B/style_transfer_bench --format nhwc --reps 5 --warmup 2 --precision bf16 2>&1 | grep -E "iteration"
  done
done
echo "# finished $(date -u)"
} > $OUT 2>&1
