#!/usr/bin/env bash
# Fault behaviour of a data-parallel job (ctest: distributed.dead_or_hung_rank_...).
#   1. a rank that dies (SIGKILL) ends the whole job: mpirun exits non-zero,
#      well before the timeout, and says which rank died;
#   2. a rank that hangs (stops calling collectives) makes the other throw
#      "... did not complete within 3 s" and abort the job;
#   3. (with resnet_cifar10 built) a 2-rank training run whose rank 1 is
#      killed after its first checkpoints ends with an error, and a restart
#      resumes from the last checkpoint and finishes.
# PART "ranks" runs 1 and 2, "resume" runs 3 (two ctest cases); without
# resnet_cifar10, "resume" prints "SKIPPED: ..." (ctest: Not Run).
# Usage: fault_test.sh MPIEXEC PROBE WORKDIR ranks|resume [RESNET_CIFAR10]
set -uo pipefail
MPIEXEC=$1 PROBE=$2 WORK=$3 PART=${4:-} EXAMPLE=${5:-}
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
run_mpi() { "$MPIEXEC" -np 2 --oversubscribe "$@"; }
case "$PART" in
  ranks | resume) ;;
  *) echo "usage: fault_test.sh MPIEXEC PROBE WORKDIR ranks|resume [RESNET_CIFAR10]" >&2 && exit 2 ;;
esac

if [ "$PART" = ranks ]; then

# 1. A dead rank.
t0=$(date +%s)
timeout 60 bash -c "$(declare -f run_mpi); MPIEXEC='$MPIEXEC' run_mpi '$PROBE' kill" >"$WORK/kill.log" 2>&1
rc=$?
dt=$(($(date +%s) - t0))
cat "$WORK/kill.log"
[ $rc -ne 0 ] || fail "the job went on after a rank died"
[ $rc -ne 124 ] || fail "the job hung after a rank died (killed by the 60 s timeout)"
grep -qiE "signal 9|killed|did not complete within" "$WORK/kill.log" || fail "no clear error about the dead rank"
echo "kill: mpirun exited with $rc after ${dt} s"

# 2. A hung rank.
t0=$(date +%s)
timeout 60 bash -c "$(declare -f run_mpi); MPIEXEC='$MPIEXEC' run_mpi '$PROBE' hang" >"$WORK/hang.log" 2>&1
rc=$?
dt=$(($(date +%s) - t0))
cat "$WORK/hang.log"
[ $rc -ne 0 ] || fail "the job went on with a hung rank"
[ $rc -ne 124 ] || fail "the job hung with a hung rank (killed by the 60 s timeout)"
grep -q "gradient all-reduce did not complete within 3 s on rank 0 of 2" "$WORK/hang.log" ||
  fail "rank 0 did not report the timeout"
echo "hang: mpirun exited with $rc after ${dt} s"

exit 0
fi

# 3. Training killed mid-run, then resumed from the last checkpoint.
if [ -z "$EXAMPLE" ]; then
  echo "SKIPPED: resnet_cifar10 is not built (CIFARNET_BUILD_EXAMPLES=OFF): the kill-and-resume part is not run"
  exit 0
fi
JOB="$WORK/job"
ARGS=(--job-dir "$JOB" --num-gpus 0 --num-layers 8 --train-batch-size 16 --synthetic-examples 256
  --save-checkpoints-steps 2 --save-checkpoints-secs 0 --data-format channels_last --sync
  --collective-timeout 30)
"$MPIEXEC" -np 2 --oversubscribe "$EXAMPLE" "${ARGS[@]}" --train-steps 100000 >"$WORK/train1.log" 2>&1 &
mpipid=$!
# The newest checkpoint's step (0 if none yet). Only the last few are kept,
# and on a fast machine a step takes milliseconds, so look at the index
# rather than for one file.
latest() { sed -n 's/^model_checkpoint_path: "model.ckpt-\([0-9]*\).safetensors"/\1/p' "$JOB/checkpoint" 2>/dev/null || true; }
for _ in $(seq 1 300); do  # wait for a checkpoint at step 4 or later (up to 60 s)
  [ "$(latest)" ] && [ "$(latest)" -ge 4 ] && break
  kill -0 $mpipid 2>/dev/null || break
  sleep 0.2
done
[ "$(latest)" ] && [ "$(latest)" -ge 4 ] || { cat "$WORK/train1.log"; kill $mpipid; fail "no checkpoint written"; }
# The rank-1 process is the child of mpirun whose environment says so.
victim=""
for p in $(pgrep -P $mpipid); do
  if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then victim=$p; fi
done
[ -n "$victim" ] || { kill $mpipid; fail "rank 1's process not found"; }
t0=$(date +%s)
kill -9 "$victim"
timeout 60 tail --pid=$mpipid -f /dev/null
waited=$?
wait $mpipid
rc=$?
dt=$(($(date +%s) - t0))
cat "$WORK/train1.log"
[ $waited -eq 0 ] || { kill -9 $mpipid; fail "the training job hung after rank 1 was killed"; }
[ $rc -ne 0 ] || fail "the training job exited 0 after rank 1 was killed"
echo "training: mpirun exited with $rc ${dt} s after rank 1 was killed"
last=$(latest)
[ -n "$last" ] || fail "no checkpoint index"
target=$((last + 4))
timeout 120 bash -c "$(declare -f run_mpi); MPIEXEC='$MPIEXEC' run_mpi '$EXAMPLE' ${ARGS[*]} --train-steps $target" \
  >"$WORK/train2.log" 2>&1
rc=$?
cat "$WORK/train2.log"
[ $rc -eq 0 ] || fail "the restarted job failed ($rc)"
grep -q "Restored .*model.ckpt-$last.safetensors (global step $last)" "$WORK/train2.log" ||
  fail "the restart did not resume from checkpoint $last"
grep -q "global_step = $target" "$WORK/train2.log" || fail "the restart did not reach step $target"
echo "resume: restarted from step $last and trained to $target"
echo "PASS"
