#!/usr/bin/env bash
# What a network-only edit costs a downstream project: the consumer of
# tests/install/consumer_edit (network.cpp: the network; main.cpp: data,
# loop, evaluation) built from an empty folder against this source tree
# (add_subdirectory), then network.cpp edited (the second convolution's
# width 32 -> 24) and rebuilt. For each mode — header-only (cifarnet::cifarnet)
# and compiled (cifarnet::compiled), each with and without the consumer's
# precompiled header — it prints the fresh build's wall time and the
# rebuild's compiler CPU time (user+sys, bench/cpu_time_launcher.sh) and
# wall time, runs the program once, and keeps each build's .ninja_log.
# Usage: bash bench/edit_rebuild.sh [out-dir=runs/edit_rebuild] [modes="header-only compiled"] [pch="ON OFF"]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$(realpath -m "${1:-runs/edit_rebuild}")
MODES=${2:-header-only compiled}
PCHS=${3:-ON OFF}
JOBS=$(nproc)
mkdir -p "$OUT"
command -v /usr/bin/time >/dev/null || { echo "edit_rebuild.sh: needs /usr/bin/time (Debian: time)" >&2; exit 1; }
echo "# edit_rebuild.sh at $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty'), $(date -u +%FT%TZ)"
echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(g++ --version | head -1); -j$JOBS"
printf '%-12s %-4s %14s %16s %14s\n' mode pch fresh_wall_s rebuild_cpu_s rebuild_wall_s
for mode in $MODES; do
  for pch in $PCHS; do
    d="$OUT/$mode-pch$pch"
    rm -rf "$d"
    mkdir -p "$d"
    cp -r tests/install/consumer_edit "$d/src"
    compiled=OFF
    [ "$mode" = compiled ] && compiled=ON
    export CPU_TIME_LOG="$d/cpu_fresh.log"
    cmake -S "$d/src" -B "$d/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCIFARNET_SOURCE="$ROOT" \
      -DCONSUMER_COMPILED=$compiled -DCONSUMER_PCH=$pch \
      -DCMAKE_CXX_COMPILER_LAUNCHER="$ROOT/bench/cpu_time_launcher.sh" > "$d/configure.log"
    t0=$(date +%s.%N)
    cmake --build "$d/build" -j "$JOBS" > "$d/build_fresh.log"
    t1=$(date +%s.%N)
    cp "$d/build/.ninja_log" "$d/ninja_log_fresh.txt"
    # The edit: the second convolution 32 -> 24 channels wide.
    sed -i 's/Conv2d<16, 32, 3>, BatchNorm2d<32>/Conv2d<16, 24, 3>, BatchNorm2d<24>/; s/Dense<32, 10>/Dense<24, 10>/' \
      "$d/src/network.cpp"
    grep -q 'Conv2d<16, 24, 3>' "$d/src/network.cpp" || { echo "edit_rebuild.sh: the edit did not apply" >&2; exit 1; }
    export CPU_TIME_LOG="$d/cpu_rebuild.log"
    : > "$CPU_TIME_LOG"
    t2=$(date +%s.%N)
    cmake --build "$d/build" -j "$JOBS" > "$d/build_rebuild.log"
    t3=$(date +%s.%N)
    cp "$d/build/.ninja_log" "$d/ninja_log_after_edit.txt"
    cpu=$(awk '{ s += $1 } END { printf "%.2f", s }' "$CPU_TIME_LOG")
    printf '%-12s %-4s %14.1f %16s %14.1f\n' "$mode" "$pch" "$(echo "$t1 - $t0" | awk '{print $1 - $3}')" \
      "$cpu" "$(echo "$t3 - $t2" | awk '{print $1 - $3}')"
    sed 's/^/    rebuilt: /' "$CPU_TIME_LOG"
    "$d/build/app" > "$d/run.log" 2>&1 || { echo "edit_rebuild.sh: the program failed ($d/run.log)" >&2; exit 1; }
    sed 's/^/    run: /' "$d/run.log" | tail -1
  done
done
