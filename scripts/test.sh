#!/usr/bin/env bash
# Sets everything up and runs every test: installs the Debian packages,
# checks formatting, then the stages:
#   main  configure + build everything (warnings are errors), ctest; the
#         examples' sources again without the CUDA backend (clang
#         -fsyntax-only: checked, not built). When the
#         asan stage runs too, the tests it runs (below) are left to it: each
#         test is compiled once, not twice (docs/RELIABILITY.md has the
#         stage times)
#   asan  the library's test areas (core, backend, nn, optim, io, data, train,
#         vision, fuzz-input replay) built by clang with AddressSanitizer +
#         UBSan (warnings are errors here too: the main stage holds the code
#         to GCC's warnings, this one to clang's), ctest; the example programs,
#         benchmarks, MPI, install and CUDA tests run in the main stage only;
#         CIFARNET_ASAN_FULL=1 builds and runs the whole suite instead
#   tsan  the input-pipeline (tests/data) and trainer (tests/train) tests
#         built with ThreadSanitizer, ctest (OMP_NUM_THREADS=1: libgomp is
#         not TSan-instrumented, see docs/RELIABILITY.md)
#   fuzz  each libFuzzer target for 20 s, two at a time (scripts/fuzz.sh;
#         only with clang; longer campaigns: docs/RELIABILITY.md)
# Usage: bash scripts/test.sh [build-dir=build]
# CIFARNET_CI_STAGES="main asan" runs only those stages (default: all four);
# the other builds go to <build-dir>-nocuda, -asan, -tsan and -fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STAGES=${CIFARNET_CI_STAGES:-main asan tsan fuzz}
JOBS=$(nproc)
has() { [[ " $STAGES " == *" $1 "* ]]; }
declare -a SUMMARY=()
timed() {  # timed <label> <command...>: runs it, records its wall time
  local label=$1 t0=$SECONDS
  shift
  echo "=== $label"
  "$@"
  SUMMARY+=("$(printf '%-28s %5ds' "$label" $((SECONDS - t0)))")
}

timed "setup" bash scripts/setup.sh
timed "format check" bash scripts/check_format.sh
timed "layering check" bash scripts/check_layering.sh
timed "include graph check" bash scripts/check_includes.sh

# The test areas the asan stage builds and runs (CIFARNET_TEST_AREAS).
ASAN_AREAS="core;backend;nn;optim;io;data;train;vision;fuzz;docs"
if has main; then
  # With the asan stage, main builds the areas that need the examples, MPI,
  # CUDA or an install (backend: the CUDA tests; train: the demo's resume
  # test) but not those areas' CPU test executables (test_backend,
  # test_train; nn's but one), which the asan stage builds and runs; the
  # readers' ASan double of tests/data is the asan stage's too. The two
  # compute-bound programs that train or step whole networks at batch 128
  # against double arithmetic (test_backend_numerics, test_nn_training) run
  # here, not under ASan: at -O1 with ASan they took 257 s of compiling and
  # 141 s of running on a 2-core EPYC, about a quarter of that stage, for
  # code the asan stage's other tests run at smaller sizes.
  MAIN_SCOPE=""
  ASAN_SKIP=""
  if has asan && [ "${CIFARNET_ASAN_FULL:-0}" != 1 ]; then
    MAIN_SCOPE="'-DCIFARNET_TEST_AREAS=backend;compile_fail;distributed;examples;install;nn;reliability;train' \
      '-DCIFARNET_SKIP_TESTS=test_backend;test_train;test_nn;test_nn_plan;test_nn_train_executor;test_nn_recipe;test_nn_tf_goldens' \
      -DCIFARNET_DATA_ASAN=OFF"
    ASAN_SKIP="'-DCIFARNET_SKIP_TESTS=test_backend_numerics;test_nn_training'"
  fi
  # The benchmarks at -O0 (bench/CMakeLists.txt): built to check that they
  # compile and run (bench.* tests: flags, --explain and one step), never for
  # figures.
  timed "main: configure + build" bash -c "cmake -S . -B '$BUILD' -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCIFARNET_WERROR=ON -DCIFARNET_BENCH_OPTIMIZATION=-O0 $MAIN_SCOPE && cmake --build '$BUILD' -j $JOBS"
  timed "main: ctest" bash -c "cd '$BUILD' && ctest --output-on-failure -j $JOBS --timeout 900"
  # The examples' sources once more without the CUDA backend (checked by
  # clang's -fsyntax-only, scripts/syntax_only.sh: every diagnostic, no code
  # generated, nothing linked): a CUDA name outside #ifdef
  # CIFARNET_WITH_CUDA must fail CI even on machines that have the toolkit,
  # as it fails every build on machines that do not. Only the sources that
  # include a file testing CIFARNET_WITH_CUDA or _NCCL are checked: the
  # others preprocess to the same text in both builds (SYNTAX_ONLY_WHEN).
  NOCUDA_CXX=clang++
  command -v "$NOCUDA_CXX" >/dev/null || NOCUDA_CXX=g++
  timed "main: check examples without CUDA" bash -c "CXX=$NOCUDA_CXX cmake -S . -B '$BUILD-nocuda' -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE='-O0 -DNDEBUG' -DCIFARNET_WERROR=ON \
    -DCMAKE_CXX_COMPILER_LAUNCHER='$PWD/scripts/syntax_only.sh' \
    -DCIFARNET_CUDA=OFF -DCIFARNET_BUILD_TESTS=OFF -DCIFARNET_BUILD_BENCH=OFF >/dev/null && \
    objs=\$(ninja -C '$BUILD-nocuda' -t targets all | sed -n 's|^\\(examples/[^:]*\\.o\\): .*|\\1|p') && \
    [ -n \"\$objs\" ] && SYNTAX_ONLY_WHEN='CIFARNET_WITH_(CUDA|NCCL)' ninja -C '$BUILD-nocuda' -j $JOBS \$objs"
fi

if has asan; then
  # CIFARNET_ASAN_FULL=1: the whole suite, examples and MPI included (about
  # twice the build time: docs/RELIABILITY.md).
  if [ "${CIFARNET_ASAN_FULL:-0}" = 1 ]; then
    ASAN_SCOPE="-DCIFARNET_BUILD_EXAMPLES=ON -DCIFARNET_TEST_AREAS="
  else
    ASAN_SCOPE="-DCIFARNET_BUILD_EXAMPLES=OFF '-DCIFARNET_TEST_AREAS=$ASAN_AREAS'"
  fi
  # -O0: clang builds these tests with ASan 2.8x faster than at -O1 (the
  # stage's build: 512 s against 1,070 s) and ASan misses nothing optimised
  # away; the compute-bound test programs keep -O1 (cifarnet_compute_bound
  # in tests/CMakeLists.txt, docs/RELIABILITY.md). The CUDA backend is the
  # main stage's: without a GPU its cases are skipped, and CUDA's runtime is
  # not ASan-clean.
  # clang: it builds these template-heavy tests with ASan about 2.5x faster
  # than GCC 12 (docs/RELIABILITY.md); CIFARNET_ASAN_CXX=g++ builds with GCC
  # (then -Wmaybe-uninitialized is no error: GCC 12 with -fsanitize=address
  # reports false ones in libstdc++'s <regex>).
  ASAN_CXX=${CIFARNET_ASAN_CXX:-clang++}
  command -v "$ASAN_CXX" >/dev/null || ASAN_CXX=g++
  ASAN_FLAGS="-O0 -DNDEBUG"
  [[ "$ASAN_CXX" == *clang* ]] || ASAN_FLAGS="$ASAN_FLAGS -Wno-error=maybe-uninitialized"
  timed "asan+ubsan: configure + build" bash -c "CXX='$ASAN_CXX' cmake -S . -B '$BUILD-asan' -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE='$ASAN_FLAGS' \
    -DCIFARNET_SANITIZE=ON -DCIFARNET_WERROR=ON -DCIFARNET_BUILD_BENCH=OFF -DCIFARNET_CUDA=OFF -DCIFARNET_TEST_PCH=ON \
    $ASAN_SCOPE $ASAN_SKIP && \
    cmake --build '$BUILD-asan' -j $JOBS"
  timed "asan+ubsan: ctest" bash -c "cd '$BUILD-asan' && \
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/fuzz/ubsan_suppressions.txt \
    ctest --output-on-failure -j $JOBS --timeout 1800"
fi

if has tsan; then
  timed "tsan: configure + build" bash -c "cmake -S . -B '$BUILD-tsan' -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE='-O1 -DNDEBUG' -DCIFARNET_TSAN=ON -DCIFARNET_WERROR=ON -DCIFARNET_CUDA=OFF \
    -DCIFARNET_BUILD_EXAMPLES=OFF -DCIFARNET_BUILD_BENCH=OFF '-DCIFARNET_TEST_AREAS=data;train' && \
    cmake --build '$BUILD-tsan' --target test_data test_train -j $JOBS"
  # test_data_asan (tests/data) is ASan-only and not built here.
  timed "tsan: ctest (data, train)" bash -c "cd '$BUILD-tsan' && OMP_NUM_THREADS=1 \
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --output-on-failure -j $JOBS --timeout 1800 -L 'data|train' -E '^asan/'"
fi

if has fuzz; then
  if command -v clang++ >/dev/null; then
    # -seed=1: the same mutation sequence on every run (a finding reproduces).
    timed "fuzz: build + 20 s/target" env FUZZ_JOBS="$JOBS" FUZZ_ARGS="${FUZZ_ARGS:--seed=1}" \
      bash scripts/fuzz.sh 20 "$BUILD-fuzz"
  else
    echo "=== fuzz: skipped (no clang++)"
  fi
fi

echo
echo "test.sh: stage wall times"
printf '  %s\n' "${SUMMARY[@]}"
