#!/usr/bin/env bash
# The probes behind docs/BENCHMARKS.md's entry "2026-12-04 14:10 UTC, AMX
# Xeon: the fp32 direct kernels at the FMA limit" (run from the repository
# root after a Release build; nothing here is part of the build).
#   rows_probe: the forward tile over R output rows (tile_rows.patch, applied
#     to include/ for the probe only) against tile<> (one row), one thread,
#     64 images, best of 15; the bits are compared.
#   wino_probe: the own Winograd F(4x4,3x3) forward (AVX2 kernels) against
#     the own direct forward (AVX-512), batch 128, 2 threads, medians of 11.
set -euo pipefail
d=docs/runs/bench/2026-12-04-fp32-kernel-probes
git apply "$d/tile_rows.patch"
g++ -O3 -std=c++17 -fopenmp -Iinclude -I/usr/include/eigen3 "$d/rows_probe.cpp" -o /tmp/rows_probe
git apply -R "$d/tile_rows.patch"
g++ -O3 -std=c++17 -fopenmp -Iinclude -I/usr/include/eigen3 "$d/wino_probe.cpp" -o /tmp/wino_probe
/tmp/rows_probe
OMP_NUM_THREADS=2 /tmp/wino_probe
OMP_NUM_THREADS=1 build/bench/peak
