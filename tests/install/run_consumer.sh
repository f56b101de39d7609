#!/usr/bin/env bash
# Builds and runs the downstream consumer project against cifarnet; with
# find_package, with every optional dependency hidden from the consumer.
# Usage: run_consumer.sh <cifarnet-source> <work-dir> find_package|add_subdirectory
set -euo pipefail
src=$1 work=$2 mode=$3
rm -rf "$work" && mkdir -p "$work"
# Release at -O1: this checks that the consumer configures, builds, links and
# trains, not how fast (-O1 builds it in about two thirds of -O3's time).
release=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG")
if [ "$mode" = find_package ]; then
  cmake -S "$src" -B "$work/cifarnet-build" -G Ninja -DCIFARNET_BUILD_TESTS=OFF -DCIFARNET_BUILD_EXAMPLES=OFF \
    -DCIFARNET_BUILD_BENCH=OFF -DCIFARNET_COMPILED=OFF -DCMAKE_INSTALL_PREFIX="$work/prefix" > "$work/configure.log"
  cmake --install "$work/cifarnet-build" > "$work/install.log"
  test -f "$work/prefix/include/cifarnet/cifarnet.hpp"
  test -f "$work/prefix/lib/cmake/cifarnet/cifarnetConfig.cmake" || test -f "$work/prefix/lib/x86_64-linux-gnu/cmake/cifarnet/cifarnetConfig.cmake"
  # The consumer asks for no optional component, so it needs none of their
  # dependencies: every one is hidden from it (installed with them or not).
  hide=()
  for d in Matio CURL LibArchive OpenSSL MPI CUDAToolkit CUDNN NCCL; do
    hide+=("-DCMAKE_DISABLE_FIND_PACKAGE_$d=TRUE")
  done
  cmake -S "$src/tests/install/consumer" -B "$work/app" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
    -DCIFARNET_MODE=find_package "${release[@]}" "${hide[@]}"
else
  cmake -S "$src/tests/install/consumer" -B "$work/app" -G Ninja -DCIFARNET_SOURCE="$src" \
    -DCIFARNET_MODE=add_subdirectory "${release[@]}"
fi
cmake --build "$work/app"
OMP_NUM_THREADS=1 "$work/app/app"
