#!/usr/bin/env bash
# Page faults over a whole cifarnet_bench run at two lengths (set-up or step?), the kernel's page
# clearing in a whole run's perf samples, and libgomp's share per thread after the warm-up.
# Usage: BENCH=build/bench/cifarnet_bench bash run_faults_waits.sh > faults_waits.txt
set -euo pipefail
BENCH=${BENCH:?}
args="--only resnet56 --formats nhwc --precision bf16 --warmup 1 --profile 0"
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $BENCH $args"
for reps in 2 8; do
  echo "## /usr/bin/time -v, --reps $reps"
  OMP_NUM_THREADS=2 /usr/bin/time -v "$BENCH" $args --reps $reps 2>&1 | grep -E '^resnet56|Minor|Elapsed'
done
echo "## perf record over the whole run (--reps 3): the top symbols"
OMP_NUM_THREADS=2 perf record -q -o /tmp/perf_fw.data -- "$BENCH" $args --reps 3 2>&1 | grep -E '^resnet56'
perf report -i /tmp/perf_fw.data --no-children --sort dso,sym -g none --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -6 | cut -c1-120 || true
perf report -i /tmp/perf_fw.data --no-children --sort dso,sym -g none --stdio 2>/dev/null | grep -E "clear_page" || true
echo "## perf record -D 3000 (after set-up and warm-up, --reps 8): samples by thread and object"
OMP_NUM_THREADS=2 perf record -q -D 3000 -o /tmp/perf_fw.data -- "$BENCH" $args --reps 8 2>&1 | grep -E '^resnet56'
perf report -i /tmp/perf_fw.data --no-children --sort pid,dso -g none --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -10 || true
echo "# $(date -u +%FT%TZ) done"
