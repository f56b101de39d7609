#!/usr/bin/env bash
# The plan executor's inference with and without conv_epilogue_in_registers
# (the own AVX2 forward with the bias, residual sum and ReLU in registers),
# one binary, rounds alternated: bash run.sh <build-dir> [rounds=3]
set -euo pipefail
B=${1:-build}
R=${2:-3}
echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty'), loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$R"); do
  for off in "" conv_epilogue_in_registers; do
    echo "== round $r, rules off: ${off:-none}"
    OMP_NUM_THREADS=2 "$B/bench/cifarnet_bench" --only infer20,infer56 --formats nhwc --precision fp32 --reps 7 \
      --warmup 10 --profile 0 --infer-batch 100 ${off:+--rules-off "$off"} 2>&1 | grep -E '^infer'
  done
done
