#!/usr/bin/env bash
# The batch norm's input gradient in AVX-512 registers (bn::input_gradient_rows_avx512)
# against the binary before it, alternated: OLD = cifarnet_bench built at c68d24b
# (copied aside before the change), NEW = build/bench/cifarnet_bench with it.
# Usage: OLD=/tmp/cifarnet_bench_old NEW=build/bench/cifarnet_bench ROUNDS=5 bash run.sh > side_by_side.txt
set -euo pipefail
OLD=${OLD:?} NEW=${NEW:?} ROUNDS=${ROUNDS:-5}
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then order="old new"; else order="new old"; fi
  for which in $order; do
    bin=$OLD; [ "$which" = new ] && bin=$NEW
    for prec in bf16 fp32; do
      OMP_NUM_THREADS=2 "$bin" --only resnet20,resnet56,airbench --formats nhwc --precision $prec --reps 5 \
        --warmup 2 --profile 0 2>&1 | grep -E '^(resnet|airbench)' | sed "s/^/round $r $which $prec /"
    done
  done
done
echo "# $(date -u +%FT%TZ) done"
