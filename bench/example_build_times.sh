#!/usr/bin/env bash
# Build time of example targets from a configured, empty build folder (-j of
# the cores), in the compiled mode (the examples' default: the oneDNN ops in
# cifarnet::compiled, built with the target) and header-only
# (-DCIFARNET_COMPILED=OFF), one target after the other; the wall time and
# each object's seconds from <dir>/.ninja_log.
# Usage: [MODES="ON OFF"] bash bench/example_build_times.sh [work-dir=runs/example_build] [targets...]
# (MODES: the values of CIFARNET_COMPILED to build with)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=$(realpath -m "${1:-runs/example_build}")
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(resnet_cifar10 style_transfer cifar10_speedrun)
JOBS=$(nproc)
mkdir -p "$WORK"
echo "# example_build_times.sh at $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty'), $(date -u +%FT%TZ)"
echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p'), $JOBS cores; $(g++ --version | head -1); -j$JOBS"
echo "#   cmake -S . -B <dir> -G Ninja -DCMAKE_BUILD_TYPE=Release -DCIFARNET_WERROR=ON -DCIFARNET_COMPILED=<ON|OFF> (tests, bench off)"
echo "#   cmake --build <dir> --target <target> -j$JOBS"
for compiled in ${MODES:-ON OFF}; do
  for t in "${TARGETS[@]}"; do
    d="$WORK/compiled-$compiled-$t"
    rm -rf "$d"
    cmake -S "$ROOT" -B "$d" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCIFARNET_WERROR=ON -DCIFARNET_COMPILED=$compiled \
      -DCIFARNET_BUILD_TESTS=OFF -DCIFARNET_BUILD_BENCH=OFF > "$d.configure.log"
    t0=$(date +%s.%N)
    cmake --build "$d" --target "$t" -j "$JOBS" > "$d.build.log"
    t1=$(date +%s.%N)
    mode=header-only
    [ "$compiled" = ON ] && mode=compiled
    printf '%-12s %-18s wall %6.1f s\n' "$mode" "$t" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
    awk 'NR > 1 { printf "      %6.1f s  %s\n", ($2 - $1) / 1000, $4 }' "$d/.ninja_log"
  done
done
