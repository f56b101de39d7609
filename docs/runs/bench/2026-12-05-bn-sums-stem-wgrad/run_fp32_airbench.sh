#!/usr/bin/env bash
# The same two binaries as run.sh on what the two rules should not touch:
# fp32 training (ResNet-20/-56) and airbench94's bf16 step (standalone batch
# norms with the GELU, whose sums loop nhwc_sums was changed for), 3 rounds
# alternated. Usage: OLD=... NEW=... bash run_fp32_airbench.sh
set -euo pipefail
: "${OLD:?}" "${NEW:?}"
echo "# $(date -u +%FT%TZ) $(lscpu | grep 'Model name' | sed 's/ \+/ /g'), $(nproc) CPUs"
echo "# OLD=$OLD NEW=$NEW"
for round in 1 2 3; do
  if [ $((round % 2)) = 1 ]; then order="$OLD $NEW"; else order="$NEW $OLD"; fi
  for b in $order; do
    tag=$([ "$b" = "$OLD" ] && echo old || echo new)
    "$b" --only resnet20,resnet56 --formats nhwc --precision fp32 --reps 5 --profile 0 2>&1 |
      grep -E '^resnet' | sed "s/^/round $round $tag fp32  /"
    "$b" --only airbench --formats nhwc --precision bf16 --reps 5 --profile 0 2>&1 |
      grep -E '^airbench' | sed "s/^/round $round $tag bf16  /"
  done
done
echo "# $(date -u +%FT%TZ) end"
