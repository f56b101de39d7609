#!/usr/bin/env bash
# The installed cifarnet.pc: pkg-config validates it, and a program built
# with nothing but `pkg-config --cflags --libs cifarnet` (oneDNN, the
# xtensor-blas reference backend, OpenMP) compiles, links and runs.
# Usage: run_pkg_config.sh <cifarnet-source> <install-prefix> <work-dir> <pkg-config> <c++ compiler>
set -euo pipefail
src=$1 prefix=$2 work=$3 pkg_config=$4 cxx=$5
rm -rf "$work" && mkdir -p "$work"
fail() {
  echo "FAIL: $*"
  exit 1
}
pc=$(find "$prefix" -name cifarnet.pc | head -1)
[ -n "$pc" ] || fail "no cifarnet.pc under $prefix"
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
"$pkg_config" --validate cifarnet || fail "pkg-config does not accept $pc"
version=$("$pkg_config" --modversion cifarnet)
echo "cifarnet.pc: version $version"
read -r -a flags <<< "$("$pkg_config" --cflags --libs cifarnet)"
echo "pkg-config --cflags --libs cifarnet: ${flags[*]}"
"$cxx" -O1 -o "$work/app" "$src/tests/install/consumer_pkg_config/main.cpp" "${flags[@]}" ||
  fail "the program does not build with pkg-config's flags"
OMP_NUM_THREADS=1 "$work/app"
