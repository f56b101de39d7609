#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/, clang, -fsanitize=fuzzer,address,
# undefined) and runs each for a given time, printing per target: executions,
# exec/s, coverage (cov: edges, ft: features), corpus entries, and whether it
# crashed (the input is then saved under <build-dir>/fuzz-artifacts/<target>/).
#
# Usage: bash scripts/fuzz.sh [seconds-per-target=60] [build-dir=build-fuzz]
# Environment: FUZZ_TARGETS="cifar image" runs only those; FUZZ_JOBS=2 runs two
# targets at a time (default 1); FUZZ_NO_BUILD=1 skips configure + build;
# FUZZ_ARGS="-malloc_limit_mb=16384" adds libFuzzer flags (after the defaults).
# The committed seeds (tests/fuzz/corpus/<t>) and regressions are read only;
# inputs the fuzzer finds go to <build-dir>/fuzz-corpus/<t> and are kept
# between runs. Exit status: 1 when any target crashed, else 0.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
BUILD=${2:-build-fuzz}
JOBS=${FUZZ_JOBS:-1}
ALL="cifar cifar_pickle tfrecord example safetensors checkpoint_index tfevents image matconvnet"
TARGETS=${FUZZ_TARGETS:-$ALL}

if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found (libFuzzer needs clang)" >&2
  exit 2
fi
if [ -z "${FUZZ_NO_BUILD:-}" ]; then
  CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCIFARNET_FUZZ=ON \
    -DCIFARNET_BUILD_EXAMPLES=OFF -DCIFARNET_BUILD_BENCH=OFF -DCIFARNET_TEST_AREAS=fuzz \
    -DCIFARNET_NATIVE=OFF >/dev/null
  build_targets=()
  for t in $TARGETS; do build_targets+=("fuzz_$t"); done
  cmake --build "$BUILD" --target "${build_targets[@]}" -j 2
fi

run_one() {
  local t=$1 exe="$BUILD/tests/fuzz/fuzz_$1" work="$BUILD/fuzz-corpus/$1" art="$BUILD/fuzz-artifacts/$1"
  local log="$BUILD/fuzz-logs/$1.log" inputs=(tests/fuzz/corpus/"$1")
  mkdir -p "$work" "$art" "$BUILD/fuzz-logs"
  [ -d tests/fuzz/regressions/"$1" ] && inputs+=(tests/fuzz/regressions/"$1")
  local rc=0 extra=()
  # matconvnet: Debian's matio allocates what a compressed variable claims
  # before cifarnet sees it (tests/fuzz/known/README.md); fork mode with
  # -ignore_ooms/-ignore_timeouts keeps fuzzing past those known findings and
  # still stops on any crash.
  # A claim past ASan's largest allocation (1 TiB) is not an OOM to libFuzzer
  # but an ASan abort inside matio: allocator_may_return_null=1 makes it the
  # NULL that malloc returns outside ASan, which matio reports as an error.
  local asan=${ASAN_OPTIONS:-detect_leaks=1}
  if [ "$1" = matconvnet ]; then
    extra=(-fork=1 -ignore_ooms=1 -ignore_timeouts=1)
    asan="$asan:allocator_may_return_null=1"
  fi
  # -rss_limit_mb / -malloc_limit_mb: an input that makes a parser allocate
  # more than 2 GiB is a finding. -timeout: one input taking > 25 s is one.
  ASAN_OPTIONS=$asan OMP_NUM_THREADS=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/fuzz/ubsan_suppressions.txt \
    "$exe" -max_total_time="$SECS" -timeout=25 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$art/" "${extra[@]}" ${FUZZ_ARGS:-} "$work" "${inputs[@]}" \
    >"$log" 2>&1 || rc=$?
  echo "$rc" >"$log.rc"
}

# A target failed when libFuzzer exited non-zero, except in fork mode
# (matconvnet) where it also exits non-zero after ignored OOMs/timeouts:
# there only a crash counts (its oom/timeout/crash line, crash-* artifacts).
failed() {
  local t=$1 log="$BUILD/fuzz-logs/$1.log" rc crashes
  rc=$(cat "$log.rc" 2>/dev/null || echo missing)
  [ "$rc" = 0 ] && return 1
  crashes=$(grep -o 'oom/timeout/crash: [0-9]*/[0-9]*/[0-9]*' "$log" | tail -1 | cut -d' ' -f2 | cut -d/ -f3 || true)
  if [ -n "$crashes" ] && [ "$crashes" = 0 ] && ! ls "$BUILD/fuzz-artifacts/$t"/crash-* >/dev/null 2>&1 &&
    grep -q '^INFO: exiting: [0-9]* time:' "$log"; then
    return 1
  fi
  return 0
}

summarize() {
  local t=$1 log="$BUILD/fuzz-logs/$1.log"
  local rc execs eps cov ft corp result
  rc=$(cat "$log.rc" 2>/dev/null || echo missing)
  # (|| true: under pipefail a grep that finds nothing would end the script)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [ -z "$execs" ]; then  # -fork=N mode: "#<execs>: cov: .. exec/s <n> oom/timeout/crash: a/b/c"
    execs=$(grep -o '^#[0-9]*:' "$log" | tail -1 | tr -d '#:' || true)
    eps=$(grep -o 'exec/s [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  fi
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  corp=$(grep -o 'corp: [0-9]*\(/[0-9]*[a-zA-Z]*\)\?' "$log" | tail -1 | cut -d' ' -f2 || true)
  ignored=$(grep -o 'oom/timeout/crash: [0-9/]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  if ! failed "$t"; then
    result="no crash${ignored:+ (ignored oom/timeout/crash: $ignored)}"
  else
    result="CRASH (exit $rc): $(ls "$BUILD/fuzz-artifacts/$t" 2>/dev/null | tr '\n' ' ')see $log"
  fi
  printf '%-17s %10s %8s %7s %7s %10s  %s\n' "$t" "${execs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" \
    "${corp:-?}" "$result"
}

start=$(date +%s)
running=0
for t in $TARGETS; do
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  echo "fuzz.sh: running fuzz_$t for ${SECS}s"
  run_one "$t" &
  running=$((running + 1))
done
wait || true

echo
echo "fuzz.sh: ${SECS}s per target, $JOBS at a time, $(($(date +%s) - start))s wall"
printf '%-17s %10s %8s %7s %7s %10s  %s\n' target executions exec/s cov ft corpus result
status=0
for t in $TARGETS; do
  summarize "$t"
  if failed "$t"; then status=1; fi
done
exit $status
