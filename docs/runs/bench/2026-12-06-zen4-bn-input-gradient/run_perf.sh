#!/usr/bin/env bash
# perf samples of the bf16 ResNet-56 step after 3 s (set-up and warm-up left out), OLD and NEW
# alternated; the input gradient's functions' share of each run's samples and the step rate.
# Usage: OLD=/tmp/cifarnet_bench_old NEW=build/bench/cifarnet_bench ROUNDS=2 bash run_perf.sh > perf_side_by_side.txt
set -euo pipefail
OLD=${OLD:?} NEW=${NEW:?} ROUNDS=${ROUNDS:-2}
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then order="old new"; else order="new old"; fi
  for which in $order; do
    bin=$OLD; [ "$which" = new ] && bin=$NEW
    OMP_NUM_THREADS=2 perf record -q -D 3000 -o /tmp/perf_ig.data -- "$bin" --only resnet56 --formats nhwc \
      --precision bf16 --reps 8 --warmup 1 --profile 0 2>&1 | grep -E '^resnet56' | sed "s/^/round $r $which /"
    perf report -i /tmp/perf_ig.data --no-children --sort sym -g none --stdio 2>/dev/null |
      grep -E 'input_gradient|bf16dot::WeightGrad::sums|libgomp' | head -8 | sed "s/^/round $r $which /" |
      sed -E 's/cifarnet::backend::onednn::bn:://'
    perf report -i /tmp/perf_ig.data --no-children --sort sym -g none --stdio 2>/dev/null |
      grep -E 'input_gradient' | awk -v p="round $r $which" '{s += $1} END {printf "%s input_gradient total %.2f %%\n", p, s}'
  done
done
echo "# $(date -u +%FT%TZ) done"
