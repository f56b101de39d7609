#!/usr/bin/env bash
# Per-kind profile of the bf16 ResNet-56 step (cifarnet_bench --profile 1), OLD and NEW alternated.
# Usage: OLD=/tmp/cifarnet_bench_old NEW=build/bench/cifarnet_bench ROUNDS=4 bash run_profile.sh > profile_side_by_side.txt
set -euo pipefail
OLD=${OLD:?} NEW=${NEW:?} ROUNDS=${ROUNDS:-4}
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then order="old new"; else order="new old"; fi
  for which in $order; do
    bin=$OLD; [ "$which" = new ] && bin=$NEW
    for prec in bf16 fp32; do
      OMP_NUM_THREADS=2 "$bin" --only resnet56 --formats nhwc --precision $prec --reps 3 --warmup 1 --profile 1 2>&1 |
        grep -E '^resnet56|per kind|booked' | sed "s/^/round $r $which $prec /"
    done
  done
done
echo "# $(date -u +%FT%TZ) done"
