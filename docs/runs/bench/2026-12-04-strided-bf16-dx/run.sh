#!/usr/bin/env bash
# ResNet-20's bf16 step with per-layer profiles, b9774ff's cifarnet_bench
# ("old") against this tree's ("new": the pooling kernels of the entry
# before and the stride-2 convolutions' bf16 dx, so that
# bf16_branch_gradient fires in the downsampling blocks too), 3 rounds
# alternated, one process each: prof_old_<r>.txt, prof_new_<r>.txt.
# OLD_BIN: b9774ff's build/bench/cifarnet_bench.
set -euo pipefail
P=$(dirname "$0")
OLD_BIN=${OLD_BIN:?b9774ff\'s cifarnet_bench}
NEW_BIN=${NEW_BIN:-build/bench/cifarnet_bench}
export OMP_NUM_THREADS=2
for r in 1 2 3; do for v in old new; do
  B=$([ $v = old ] && echo "$OLD_BIN" || echo "$NEW_BIN")
  "$B" --only resnet20 --formats nhwc --precision bf16 --reps 5 > "$P/prof_${v}_$r.txt" 2>&1
done; done
