#!/usr/bin/env bash
# Side by side: the bench before the plan decided the neighbour hand-overs (base) and after (new), alternated, 3 rounds, one thread each.
# base: build-bench/bench/cifarnet_bench of /work/main at 03943ff (the step's code as b924af5's); new: the plan-authority tree.
BASE=${BASE:-/work/main/build-bench/bench/cifarnet_bench}
NEW=${NEW:-/work/wt-plan3/build-p3/bench/cifarnet_bench}
OUT=${OUT:-/work/main/docs/runs/bench/2026-12-02-plan-decides-side-by-side/run.txt}
# run_bf16_again.txt: PRECS=bf16 OUT=.../run_bf16_again.txt; run_bf16_new_first.txt: the same with ORDER="new base"
PRECS=${PRECS:-fp32 bf16}
ORDER=${ORDER:-base new}
{
echo "# $(date -u); CPU: $(lscpu | grep 'Model name' | sed 's/ \+/ /g'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2) model $(grep -m1 '^model' /proc/cpuinfo | cut -d: -f2), flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_tile|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "# base: $BASE; new: $NEW"
echo "# one OpenMP thread each: the other core runs a one-thread training run (cifar10_train) throughout"
for round in 1 2 3; do
  for prec in $PRECS; do
    for which in $ORDER; do
      B=$BASE; [ $which = new ] && B=$NEW
      echo "## round $round $prec $which: OMP_NUM_THREADS=1 $B --only resnet20,infer20 --formats nhwc --precision $prec --profile 0"
      OMP_NUM_THREADS=1 $B --only resnet20,infer20 --formats nhwc --precision $prec --profile 0 2>&1
    done
  done
done
echo "# finished $(date -u)"
} > $OUT 2>&1
