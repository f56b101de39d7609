#!/usr/bin/env bash
# The AMX weight gradient's phases (copy_x, copy_dy, the tile products; ms
# per call on thread 0, summed over its blocks) for ResNet-20's shapes,
# warm, after a 256 MB write ("cold") and with only x and dy flushed
# ("clfl"): the header with rdtsc timers (timers.patch), and the same with
# the next block fetched during the products (ahead_timers.patch: the
# 14:16 entry's idea again), 2 threads and 1 thread.
#   bash run.sh <repo-root> > phases.txt
set -euo pipefail
ROOT=$1
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
date -u; lscpu | grep -E 'Model name|^CPU family|^Model:'
cp "$ROOT/include/cifarnet/backend/onednn/amx_wgrad.hpp" "$W/wg_timed.hpp"
cp "$ROOT/include/cifarnet/backend/onednn/amx_wgrad.hpp" "$W/wg_pf.hpp"
(cd "$W" && patch -s wg_timed.hpp < "$HERE/timers.patch" && patch -s wg_pf.hpp < "$HERE/ahead_timers.patch")
cp "$HERE/wg_phases.cpp" "$W/"
sed 's/"wg_timed.hpp"/"wg_pf.hpp"/' "$HERE/wg_phases.cpp" > "$W/wg_phases_ahead.cpp"
for p in wg_phases wg_phases_ahead; do
  g++ -O2 -std=c++17 -fopenmp -I"$ROOT/include" -I"$W" "$W/$p.cpp" -o "$W/$p"
done
for t in 2 1; do
  for p in wg_phases wg_phases_ahead; do
    echo "== $p, $t thread(s)"
    OMP_NUM_THREADS=$t "$W/$p" "16->16"
    [ $t = 2 ] && OMP_NUM_THREADS=$t "$W/$p" "s2"
  done
done
date -u
