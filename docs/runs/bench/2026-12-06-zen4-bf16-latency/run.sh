#!/usr/bin/env bash
# bf16 against fp32 inference at batch 1 (latency) in one cifarnet_bench, alternated: is bf16 at
# batch 1 behind fp32 on this CPU (the 2026-12-06 11:48 run: ResNet-20 3,011 against 3,650 img/s)?
# Usage: BENCH=build/bench/cifarnet_bench ROUNDS=4 bash run.sh > latency_ab.txt
set -euo pipefail
BENCH=${BENCH:?} ROUNDS=${ROUNDS:-4}
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, commit $(git rev-parse --short HEAD)"
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then order="fp32 bf16"; else order="bf16 fp32"; fi
  for p in $order; do
    OMP_NUM_THREADS=2 "$BENCH" --only infer20,infer56 --formats nhwc --precision $p --reps 5 --warmup 2 \
      --profile 0 --infer-batch 1 2>&1 | grep -E '^infer' | sed "s/^/round $r $p /"
  done
done
echo "# $(date -u +%FT%TZ) done"
