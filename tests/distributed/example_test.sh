#!/usr/bin/env bash
# examples/resnet_cifar10 under mpirun (ctest: distributed.resnet_cifar10_...):
#   1. a --train-batch-size that does not divide by the processes is refused
#      with the seed's kind of message, exit status 2;
#   2. 2 processes × batch 8 with --sync-batch-norm end where 1 process ×
#      batch 16 ends: same eval accuracy, eval loss within 1e-3 (channels_first:
#      oneDNN's NHWC training BN drifts a little from exact arithmetic);
#   3. the all-reduce after backward (--no-overlap-allreduce) ends where the
#      default, overlapped with backward, ends.
# Usage: example_test.sh MPIEXEC RESNET_CIFAR10 WORKDIR
set -uo pipefail
MPIEXEC=$1 EXAMPLE=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*"; exit 1; }

timeout 120 "$MPIEXEC" -np 2 --oversubscribe "$EXAMPLE" --job-dir "$WORK/bad" --num-gpus 0 --num-layers 8 \
  --train-batch-size 15 --train-steps 1 --sync >"$WORK/bad.log" 2>&1
rc=$?
cat "$WORK/bad.log"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "an indivisible batch was not refused (exit $rc)"
grep -q "\-\-train-batch-size must be multiple of the number of MPI processes (--train-batch-size 15, mpirun -np 2)" \
  "$WORK/bad.log" || fail "no divisibility message"
[ "$(grep -c 'must be multiple' "$WORK/bad.log")" -eq 1 ] || fail "the message was printed by more than rank 0"

ARGS=(--num-gpus 0 --num-layers 8 --train-batch-size 16 --train-steps 4 --synthetic-examples 128
  --data-format channels_first --save-checkpoints-secs 0)
timeout 120 "$EXAMPLE" --job-dir "$WORK/one" "${ARGS[@]}" >"$WORK/one.log" 2>&1 || { cat "$WORK/one.log"; fail "1 process"; }
timeout 120 "$MPIEXEC" -np 2 --oversubscribe "$EXAMPLE" --job-dir "$WORK/two" "${ARGS[@]}" --sync --sync-batch-norm \
  --allreduce-bucket-kb 64 >"$WORK/two.log" 2>&1 || { cat "$WORK/two.log"; fail "2 processes"; }
cat "$WORK/one.log" "$WORK/two.log"
a=$(grep -o "accuracy = [0-9.]*, loss = [0-9.]*" "$WORK/one.log")
b=$(grep -o "accuracy = [0-9.]*, loss = [0-9.]*" "$WORK/two.log")
[ -n "$a" ] && [ -n "$b" ] || fail "no final evaluation line"
[ "$(grep -c 'accuracy = ' "$WORK/two.log")" -eq 1 ] || fail "more than rank 0 evaluated"
echo "1 process: $a | 2 processes: $b"
awk -v a="$a" -v b="$b" 'BEGIN {
  split(a, x, /[=,] */); split(b, y, /[=,] */);
  if (x[2] != y[2]) exit 1;
  d = x[4] - y[4]; if (d < 0) d = -d; if (d > 1e-3) exit 1 }' || fail "the runs differ"
# 64 KiB buckets: ResNet-8's 0.3 MB of gradients in 5, most of them started
# while backward still runs.
report=$(grep -o "Gradient all-reduce (last step): [0-9]* of [0-9]* buckets" "$WORK/two.log")
[ -n "$report" ] || fail "the overlapped all-reduce did not report"
echo "$report" | awk '{ if (!($5 >= 1 && $7 >= 4)) exit 1 }' || fail "buckets did not start during backward: $report"
timeout 120 "$MPIEXEC" -np 2 --oversubscribe "$EXAMPLE" --job-dir "$WORK/after" "${ARGS[@]}" --sync \
  --sync-batch-norm --no-overlap-allreduce >"$WORK/after.log" 2>&1 || { cat "$WORK/after.log"; fail "--no-overlap-allreduce"; }
c=$(grep -o "accuracy = [0-9.]*, loss = [0-9.]*" "$WORK/after.log")
grep -q "all-reduce after backward" "$WORK/after.log" || fail "--no-overlap-allreduce not in effect"
echo "2 processes, all-reduce after backward: $c"
awk -v a="$b" -v b="$c" 'BEGIN {
  split(a, x, /[=,] */); split(b, y, /[=,] */);
  if (x[2] != y[2]) exit 1;
  d = x[4] - y[4]; if (d < 0) d = -d; if (d > 1e-4) exit 1 }' || fail "overlapped and after-backward runs differ"
echo PASS
