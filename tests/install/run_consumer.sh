#!/usr/bin/env bash
# Builds and runs the downstream consumer project against cifarnet.
# Usage: run_consumer.sh <cifarnet-source> <work-dir> find_package|add_subdirectory
set -euo pipefail
src=$1 work=$2 mode=$3
rm -rf "$work" && mkdir -p "$work"
if [ "$mode" = find_package ]; then
  cmake -S "$src" -B "$work/cifarnet-build" -G Ninja -DCIFARNET_BUILD_TESTS=OFF -DCIFARNET_BUILD_EXAMPLES=OFF \
    -DCIFARNET_BUILD_BENCH=OFF -DCMAKE_INSTALL_PREFIX="$work/prefix" > "$work/configure.log"
  cmake --install "$work/cifarnet-build" > "$work/install.log"
  test -f "$work/prefix/include/cifarnet/cifarnet.hpp"
  test -f "$work/prefix/lib/cmake/cifarnet/cifarnetConfig.cmake" || test -f "$work/prefix/lib/x86_64-linux-gnu/cmake/cifarnet/cifarnetConfig.cmake"
  cmake -S "$src/tests/install/consumer" -B "$work/app" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
    -DCIFARNET_MODE=find_package -DCMAKE_BUILD_TYPE=Release
else
  cmake -S "$src/tests/install/consumer" -B "$work/app" -G Ninja -DCIFARNET_SOURCE="$src" \
    -DCIFARNET_MODE=add_subdirectory -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$work/app"
OMP_NUM_THREADS=1 "$work/app/app"
