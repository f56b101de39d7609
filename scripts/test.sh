#!/usr/bin/env bash
# Sets everything up and runs every test: installs the Debian packages,
# configures and builds (warnings are errors), checks formatting, runs ctest.
# Usage: bash scripts/test.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
bash scripts/setup.sh
bash scripts/check_format.sh
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCIFARNET_WERROR=ON
cmake --build "$BUILD" -j "$(nproc)"
cd "$BUILD"
ctest --output-on-failure -j "$(nproc)" --timeout 900
