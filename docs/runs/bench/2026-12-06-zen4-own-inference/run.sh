#!/usr/bin/env bash
# The own inference kernels on an AVX-512 CPU without AMX: one cifarnet_bench
# binary built with the AVX-512 condition taken out of the two rules
# (conv_winograd_epilogue, conv_epilogue_in_registers), each rule turned off
# and on by --rules-off, alternated, ROUNDS rounds; fp32 ResNet-20/56
# inference at batch 100 and 1, NHWC, median of REPS repetitions each.
# Usage: bash run.sh <cifarnet_bench> > out.txt
set -euo pipefail
CB=$1
ROUNDS=${ROUNDS:-6}
REPS=${REPS:-7}
lscpu | grep -E 'Model name|^CPU family|^Model:|Flags' | sed 's/Flags:.*avx512f.*/Flags: (avx512f ...)/'
echo "binary $CB, rounds $ROUNDS, reps $REPS, $(date -u)"
declare -A OFF=(
  [onednn]="conv_winograd_epilogue,conv_epilogue_in_registers"
  [winograd]="conv_epilogue_in_registers"
  [direct]="conv_winograd_epilogue"
  [both]=""
)
for r in $(seq "$ROUNDS"); do
  for batch in 100 1; do
    for c in onednn winograd direct both; do
      args=(--only infer20,infer56 --formats nhwc --precision fp32 --reps "$REPS" --infer-batch "$batch" --profile 0)
      [ -n "${OFF[$c]}" ] && args+=(--rules-off "${OFF[$c]}")
      OMP_NUM_THREADS=2 "$CB" "${args[@]}" 2>&1 | awk -v r="$r" -v c="$c" -v b="$batch" \
        '/^infer/ {printf "round %d batch %3d %-8s %s %s img/s %s\n", r, b, c, $1, $5, $7 $8 $9}'
    done
  done
done
echo "finished $(date -u)"
