#!/bin/bash
# Side by side, alternated: ef4695e (base), the deferred output with the
# recompute in the backward (new: ef4695e + deferred_output_tried.patch),
# and the variant storing the output from the ranges (store: the same tree
# with ConvBatchNorm::forward_deferred normalising each range into the input
# tensor itself, T* dst = const_cast<T*>(x.data()) + i0 * conv_.in_image(),
# convolving from dst, and clearing in_deferred_ after its loop, so the
# backward reads the stored input and recomputes nothing).
cd /work/scratch
date -u; lscpu | grep -E "Model name|^CPU\(s\)"
for r in 1 2 3; do
  for b in base new store; do
    echo "=== round $r: $b"
    OMP_NUM_THREADS=2 ./bench_$b --only resnet20 --formats nhwc --precision fp32 --reps 5 --steps 6 --warmup 10 --profile 1 2>&1
  done
done
date -u
