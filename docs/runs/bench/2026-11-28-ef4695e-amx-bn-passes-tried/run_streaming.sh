#!/bin/bash
# Side by side, alternated: ef4695e (base) and batch norm's normalising pass
# with streaming stores for outputs of 4 MiB or more (nt; binary built from
# the tree of streaming_stores_tried.patch).
cd /work/scratch
date -u; lscpu | grep -E "Model name|^CPU\(s\)"
for r in 1 2 3 4; do
  for b in base nt; do
    echo "=== round $r: $b"
    OMP_NUM_THREADS=2 ./bench_$b --only resnet20 --formats nhwc --precision fp32 --reps 5 --steps 6 --warmup 10 --profile 1 2>&1
  done
done
date -u
