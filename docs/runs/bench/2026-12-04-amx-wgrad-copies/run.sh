#!/usr/bin/env bash
# The probes behind docs/BENCHMARKS.md's entry "the AMX weight gradient's
# copies read x and dy at the memory's rate; fetching the next block ahead
# tried and dropped" (run from the repository root; not part of the build).
#   wgc_probe: WeightGrad::run against its copies alone (copy_x, copy_dy, per
#     thread, summed over its blocks), 2 threads, medians of 9 after 2.
#   ahead_probe: with ahead.patch applied (the next block's x and dy fetched
#     into L2 during the tile products), the fetch off and on alternated call
#     by call, a 256 MiB buffer written before each call; medians of 9.
set -euo pipefail
d=docs/runs/bench/2026-12-04-amx-wgrad-copies
g++ -O3 -std=c++17 -fopenmp -Iinclude "$d/wgc_probe.cpp" -o /tmp/wgc_probe
OMP_NUM_THREADS=2 /tmp/wgc_probe
git apply "$d/ahead.patch"
g++ -O3 -std=c++17 -fopenmp -Iinclude "$d/ahead_probe.cpp" -o /tmp/ahead_probe || true
git apply -R "$d/ahead.patch"
OMP_NUM_THREADS=2 /tmp/ahead_probe
