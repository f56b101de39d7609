#!/usr/bin/env bash
# Configures cifarnet alone (no tests, examples or benchmarks, not the
# compiled-mode library: run_compiled_consumer.sh installs that) and installs it
# into <work-dir>/prefix: the fixture of the install tests that only read an
# installed tree.
# Usage: install_prefix.sh <cifarnet-source> <work-dir>
set -euo pipefail
src=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
cmake -S "$src" -B "$work/cifarnet-build" -G Ninja -DCIFARNET_BUILD_TESTS=OFF -DCIFARNET_BUILD_EXAMPLES=OFF \
  -DCIFARNET_BUILD_BENCH=OFF -DCIFARNET_COMPILED=OFF -DCMAKE_INSTALL_PREFIX="$work/prefix" > "$work/configure.log"
cmake --install "$work/cifarnet-build" > "$work/install.log"
echo "installed into $work/prefix: $(grep -c Installing "$work/install.log") files"
