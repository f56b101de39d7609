#!/usr/bin/env bash
# The probes behind the entry (outputs beside them as probes/*.txt).
set -eu
ROOT=$(cd "$(dirname "$0")/../../../.." && pwd)
P=$(cd "$(dirname "$0")" && pwd)/probes
for p in affine_sum_rows bn_passes_cold amx_forward_cold ranged_backward bandwidth; do
  g++ -O2 -march=native -fopenmp -std=c++17 -I"$ROOT/include" -I/usr/include/eigen3 "$P/$p.cpp" -ldnnl -o /tmp/probe_$p
  OMP_NUM_THREADS=2 /tmp/probe_$p > "$P/$p.txt" 2>&1
done
