#!/usr/bin/env bash
# ResNet-20 and ResNet-56 bf16 steps with per-layer profiles: this tree's
# cifarnet_bench with pooled_gradient_in_sum ("on") and without it ("off",
# --rules-off), and b9774ff's ("old": before the pooling kernels, the
# stride-2 bf16 dx and this rule), 3 rounds alternated, one process each:
# prof_<v>_<net>_<r>.txt. OLD_BIN: b9774ff's build/bench/cifarnet_bench.
set -euo pipefail
P=$(dirname "$0")
OLD_BIN=${OLD_BIN:?b9774ff\'s cifarnet_bench}
NEW_BIN=${NEW_BIN:-build/bench/cifarnet_bench}
export OMP_NUM_THREADS=2
for r in 1 2 3; do for net in resnet20 resnet56; do for v in on off old; do
  case $v in
    on) "$NEW_BIN" --only $net --formats nhwc --precision bf16 --reps 5 ;;
    off) "$NEW_BIN" --only $net --formats nhwc --precision bf16 --reps 5 --rules-off pooled_gradient_in_sum ;;
    old) "$OLD_BIN" --only $net --formats nhwc --precision bf16 --reps 5 ;;
  esac > "$P/prof_${v}_${net}_$r.txt" 2>&1
done; done; done
