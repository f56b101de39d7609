#!/usr/bin/env bash
# Side by side: the bench at fd44f2f (before the step plan) and at HEAD, alternated, 3 rounds.
cd /work/main
OUT=docs/runs/bench/2026-12-02-plan-side-by-side/run.txt
{
echo "# $(date -u); CPU: $(lscpu | grep 'Model name' | sed 's/ \+/ /g'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2) model $(grep -m1 '^model' /proc/cpuinfo | cut -d: -f2), flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_tile|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "# base: fd44f2f (/work/wt-base/build-bench/bench/cifarnet_bench); new: $(git rev-parse --short HEAD) (build-bench/bench/cifarnet_bench); both Release, same flags"
echo "# one OpenMP thread each: the other core runs a one-thread training run (cifar10_train) throughout"
for round in 1 2 3; do
  for prec in fp32 bf16; do
    for which in base new; do
      B=/work/wt-base/build-bench/bench/cifarnet_bench; [ $which = new ] && B=build-bench/bench/cifarnet_bench
      echo "## round $round $prec $which: OMP_NUM_THREADS=1 $B --only resnet20,infer20 --formats nhwc --precision $prec --profile 0"
      OMP_NUM_THREADS=1 $B --only resnet20,infer20 --formats nhwc --precision $prec --profile 0 2>&1
    done
  done
done
echo "# finished $(date -u)"
} > $OUT 2>&1
