#!/usr/bin/env bash
# Checkpoints on a full disk (docs/RELIABILITY.md): examples/train_demo
# checkpointing into a file-size limit (ulimit -f, needs no privileges) and,
# where this process may mount one, a small tmpfs. For each: the failed save
# is an error naming the file and the reason, no temporary file remains, the
# previous checkpoint and the index are unchanged byte for byte and a rerun
# with room resumes from them and ends with the uninterrupted run's final
# checkpoint; --on-checkpoint-error stop exits with status 1 at the failed
# save, continue trains on and retries at the next checkpoint.
# The two are separate ctest cases (the part is the third argument); where
# no tmpfs may be mounted, the tmpfs part prints "SKIPPED: ..." and ctest
# reports it as not run.
# Usage: disk_full.sh <train_demo binary> <work dir> ulimit|tmpfs
set -euo pipefail
bin=$1 work=$2 part=${3:-}
case "$part" in
  ulimit | tmpfs) ;;
  *) echo "usage: disk_full.sh <train_demo binary> <work dir> ulimit|tmpfs" >&2 && exit 2 ;;
esac
rm -rf "$work" && mkdir -p "$work"
# The tmpfs part runs in a private mount namespace (nothing leaks out of it),
# as root only.
if [ "$part" = tmpfs ] && { ! unshare -m true 2> /dev/null || ! unshare -m mount -t tmpfs -o size=64k tmpfs "$work" 2> /dev/null; }; then
  echo "SKIPPED: the tmpfs part needs to mount a tmpfs (root / CAP_SYS_ADMIN and unshare); the ulimit -f part is its own test"
  exit 0
fi
export OMP_NUM_THREADS=1
unset CIFARNET_TEST_SLOW_CHECKPOINT_MS
steps=40
common=(--steps $steps --checkpoint-every 5 --batch-size 8 --eval-examples 0)
final=model.ckpt-$steps.safetensors
# Checkpoints are 923,664 bytes (ResNet-8: weights, momentum, EMA).

die() { echo "FAILED: $*"; exit 1; }
expect_in() {  # expect_in <file> <fixed string>
  grep -qF -- "$2" "$1" || { echo "--- $1"; cat "$1"; die "expected '$2' in $1"; }
}
# snapshot <dir> <copy>: the checkpoints and the index, to compare later
snapshot() { rm -rf "$2" && mkdir -p "$2" && cp "$1"/checkpoint "$1"/model.ckpt-*.safetensors "$2"/; }
same_as() {  # same_as <dir> <copy>: nothing but these files changed, no temporary left
  for f in "$2"/*; do cmp "$f" "$1/$(basename "$f")" || die "$1/$(basename "$f") changed"; done
  local extra
  extra=$(cd "$1" && ls -A | grep -v '^events\.out\.tfevents\.' | sort | comm -23 - <(cd "$2" && ls -A | sort) || true)
  [ -z "$extra" ] || die "new files in $1: $extra"
}

"$bin" --job-dir "$work/straight" "${common[@]}" > "$work/straight.log"
[ -f "$work/straight/$final" ] || die "the uninterrupted run wrote no $final"

if [ "$part" = ulimit ]; then
# ---------------------------------------------------------------- ulimit -f
# A run killed after step 10 leaves checkpoints 5 and 10; the rerun under a
# 600 KiB file-size limit fails to save step 15 (EFBIG: the programs ignore
# SIGXFSZ).
rc=0
("$bin" --job-dir "$work/ulimit" "${common[@]}" --crash-at 10 > "$work/ulimit-0.log" 2>&1; exit $?) 2> /dev/null || rc=$?
[ $rc -eq 137 ] || { cat "$work/ulimit-0.log"; die "--crash-at 10: exit status $rc, expected 137 (SIGKILL)"; }
snapshot "$work/ulimit" "$work/ulimit-before"
set +e
(ulimit -f 600 && exec "$bin" --job-dir "$work/ulimit" "${common[@]}") > "$work/ulimit-stop.log" 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || { cat "$work/ulimit-stop.log"; die "ulimit -f, stop: exit status $rc, expected 1"; }
expect_in "$work/ulimit-stop.log" "Restored $work/ulimit/model.ckpt-10.safetensors (global step 10)"
expect_in "$work/ulimit-stop.log" "cannot write '$work/ulimit/model.ckpt-15.safetensors' (temporary file '$work/ulimit/.model.ckpt-15.safetensors.tmp-"
expect_in "$work/ulimit-stop.log" "): write failed after 614400 bytes: File too large; checkpoint step 15 was not saved, the latest is still '$work/ulimit/model.ckpt-10.safetensors' (step 10)"
expect_in "$work/ulimit-stop.log" "train_demo: stopped: the checkpoint of step 15 could not be saved (--on-checkpoint-error stop); rerun to resume from step 10"
same_as "$work/ulimit" "$work/ulimit-before"
echo "ulimit -f 600, --on-checkpoint-error stop: exit 1 at step 15 (File too large), checkpoints 5 and 10 and the index unchanged, no temporary file"

set +e
(ulimit -f 600 && exec "$bin" --job-dir "$work/ulimit" "${common[@]}" --on-checkpoint-error continue) > "$work/ulimit-continue.log" 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || { cat "$work/ulimit-continue.log"; die "ulimit -f, continue: exit status $rc, expected 1 (the final save fails too)"; }
n=$(grep -c "; training continues (failure " "$work/ulimit-continue.log" || true)
[ "$n" -eq 6 ] || { cat "$work/ulimit-continue.log"; die "expected 6 'training continues' warnings (steps 15..40), got $n"; }
expect_in "$work/ulimit-continue.log" "step = 25, loss = "
expect_in "$work/ulimit-continue.log" "train_demo: stopped: the checkpoint of step 40 could not be saved (--on-checkpoint-error continue); rerun to resume from step 10"
same_as "$work/ulimit" "$work/ulimit-before"
echo "ulimit -f 600, --on-checkpoint-error continue: trained to step 40 past 6 failed saves (15..40), the final save failed too: exit 1; checkpoints and index unchanged, no temporary file"

"$bin" --job-dir "$work/ulimit" "${common[@]}" > "$work/ulimit-rerun.log" 2>&1
expect_in "$work/ulimit-rerun.log" "Restored $work/ulimit/model.ckpt-10.safetensors (global step 10)"
cmp "$work/straight/$final" "$work/ulimit/$final" || die "the resumed run's final checkpoint differs"
echo "rerun without the limit: resumed from step 10, final checkpoint identical to the uninterrupted run's"
exit 0
fi

# -------------------------------------------------------------------- tmpfs
mkdir -p "$work/tmpfs"
export bin work final
export common_s="${common[*]}"
unshare -m bash -euo pipefail -c '
  common=($common_s)
  die() { echo "FAILED: $*"; exit 1; }
  expect_in() { grep -qF -- "$2" "$1" || { echo "--- $1"; cat "$1"; die "expected \"$2\" in $1"; }; }
  mount -t tmpfs -o size=1400k tmpfs "$work/tmpfs"
  d=$work/tmpfs/job
  # 1400 KiB holds one checkpoint and not two: the save at step 10 fails
  # (the previous one is deleted only once the new one is in place).
  set +e
  "$bin" --job-dir "$d" "${common[@]}" --keep-checkpoints 1 > "$work/tmpfs-stop.log" 2>&1
  rc=$?
  set -e
  [ $rc -eq 1 ] || { cat "$work/tmpfs-stop.log"; die "tmpfs, stop: exit status $rc, expected 1"; }
  expect_in "$work/tmpfs-stop.log" "cannot write '"'"'$d/model.ckpt-10.safetensors'"'"' (temporary file"
  expect_in "$work/tmpfs-stop.log" "No space left on device; checkpoint step 10 was not saved, the latest is still '"'"'$d/model.ckpt-5.safetensors'"'"' (step 5)"
  expect_in "$work/tmpfs-stop.log" "train_demo: stopped: the checkpoint of step 10 could not be saved (--on-checkpoint-error stop); rerun to resume from step 5"
  left=$(cd "$d" && ls -A | grep -v "^events\.out\.tfevents\." | tr "\n" " ")
  [ "$left" = "checkpoint model.ckpt-5.safetensors " ] || die "tmpfs, stop: left \"$left\""
  echo "tmpfs of 1400 KiB, --on-checkpoint-error stop: exit 1 at step 10 (No space left on device), checkpoint 5 and the index kept, no temporary file"

  # Room again (remount bigger): the rerun resumes from step 5 and ends equal.
  mount -o remount,size=4m "$work/tmpfs"
  "$bin" --job-dir "$d" "${common[@]}" --keep-checkpoints 1 > "$work/tmpfs-rerun.log" 2>&1
  expect_in "$work/tmpfs-rerun.log" "Restored $d/model.ckpt-5.safetensors (global step 5)"
  cmp "$work/straight/$final" "$d/$final" || die "tmpfs: the resumed run'"'"'s final checkpoint differs"
  echo "remounted with 4 MiB: resumed from step 5, final checkpoint identical to the uninterrupted run'"'"'s"

  # continue: a filler leaves room for one checkpoint only; once the first
  # save has failed the filler goes, and a later save succeeds.
  rm -rf "$d"
  mount -o remount,size=2000k "$work/tmpfs"
  head -c 1000000 /dev/zero > "$work/tmpfs/filler"
  "$bin" --job-dir "$d" "${common[@]}" --keep-checkpoints 1 --on-checkpoint-error continue > "$work/tmpfs-continue.log" 2>&1 &
  pid=$!
  for i in $(seq 1 3000); do
    grep -qF "; training continues (failure 1)" "$work/tmpfs-continue.log" && break
    kill -0 $pid 2> /dev/null || break
    sleep 0.01
  done
  rm -f "$work/tmpfs/filler"
  wait $pid || { cat "$work/tmpfs-continue.log"; die "tmpfs, continue: the run failed"; }
  expect_in "$work/tmpfs-continue.log" "No space left on device; checkpoint step 10 was not saved, the latest is still '"'"'$d/model.ckpt-5.safetensors'"'"' (step 5); training continues (failure 1)"
  cmp "$work/straight/$final" "$d/$final" || die "tmpfs, continue: the final checkpoint differs"
  n=$(grep -c "; training continues (failure " "$work/tmpfs-continue.log" || true)
  echo "tmpfs of 2000 KiB with a 1 MB filler, --on-checkpoint-error continue: $n failed save(s) from step 10 on, filler removed, later saves succeeded, exit 0, final checkpoint identical to the uninterrupted run'"'"'s"
'
