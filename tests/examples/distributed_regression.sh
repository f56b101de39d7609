#!/usr/bin/env bash
# examples/distributed_regression under mpirun -np 4 (ctest:
# examples.distributed_regression_...): the seed's distributed toy, one
# parameter server and three workers fitting y = x² + noise.
#   1. --num-ps that leaves no worker is refused (exit 2, said once);
#   2. a short asynchronous run (3000 global steps, learning rate 0.05 rather
#      than the seed's 0.001 and 100000 steps, to stay within seconds) exits
#      0; every worker pushed updates and the server applied all of them; the
#      chief's final MSE beats predicting the mean of y; the plot decodes as
#      a 640x480 RGB PNG that is not blank (its mean byte below white's
#      255); the saved model is there.
# Usage: distributed_regression.sh MPIEXEC PROGRAM PNG_INFO WORKDIR
set -uo pipefail
MPIEXEC=$1 PROGRAM=$2 PNG_INFO=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*"; exit 1; }

timeout 120 "$MPIEXEC" -np 4 --oversubscribe "$PROGRAM" --job-dir "$WORK/bad" --num-ps 4 >"$WORK/bad.log" 2>&1
rc=$?
cat "$WORK/bad.log"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "--num-ps 4 with -np 4 was not refused (exit $rc)"
grep -q "\-\-num-ps 4 with mpirun -np 4 leaves no worker" "$WORK/bad.log" || fail "no --num-ps message"
[ "$(grep -c 'leaves no worker' "$WORK/bad.log")" -eq 1 ] || fail "the message was printed by more than one rank"

JOB="$WORK/job"
timeout 200 "$MPIEXEC" -np 4 --oversubscribe "$PROGRAM" --job-dir "$JOB" --train-steps 3000 --learning-rate 0.05 \
  >"$WORK/run.log" 2>&1 || { cat "$WORK/run.log"; fail "the run failed"; }
cat "$WORK/run.log"
for w in 0 1 2; do
  n=$(sed -n "s/^Worker Done: $w (rank [0-9]*): \([0-9]*\) updates.*/\1/p" "$WORK/run.log")
  [ -n "$n" ] && [ "$n" -gt 0 ] || fail "worker $w pushed no update"
done
total=$(sed -n 's/^parameter server (rank 0): \([0-9]*\) updates.*/\1/p' "$WORK/run.log")
# Every worker stops once the global step reaches 3000; one that pulled just
# before may push one more update each.
[ -n "$total" ] && [ "$total" -ge 3000 ] && [ "$total" -le 3002 ] || fail "the server applied '$total' updates"
grep -q "^Task: [0-2] | Step: 500 | Loss: " "$WORK/run.log" || fail "no loss line at global step 500"
line=$(grep "^Evaluation at global step" "$WORK/run.log")
[ "$(echo "$line" | grep -c .)" -eq 1 ] || fail "not exactly one evaluation (the chief's)"
mse=$(echo "$line" | sed -n 's/.*: mse = \([0-9.e+-]*\) (predicting the mean: \([0-9.e+-]*\))/\1/p')
base=$(echo "$line" | sed -n 's/.*: mse = \([0-9.e+-]*\) (predicting the mean: \([0-9.e+-]*\))/\2/p')
[ -n "$mse" ] && [ -n "$base" ] || fail "no MSE in '$line'"
echo "final MSE $mse, predicting the mean $base"
# The noise's variance is 0.01: a fitted curve comes near it; the mean's MSE
# is about 0.1 (the variance of x² on [-1, 1] plus the noise).
awk -v a="$mse" -v b="$base" 'BEGIN { exit !(a < b / 2) }' || fail "the fit ($mse) does not beat the mean ($base)"
[ -s "$JOB/model.safetensors" ] || fail "no model.safetensors"
info=$("$PNG_INFO" "$JOB/regression.png") || fail "the plot does not decode: $info"
echo "plot: $info"
set -- $info
[ "$1" = 640 ] && [ "$2" = 480 ] && [ "$3" = 3 ] || fail "the plot is $1x$2x$3, not 640x480x3"
awk -v m="$4" 'BEGIN { exit !(m < 254) }' || fail "the plot is blank (mean byte $4)"
echo PASS
