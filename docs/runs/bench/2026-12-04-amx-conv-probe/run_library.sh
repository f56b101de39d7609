#!/usr/bin/env bash
# The library's kernel (include/cifarnet/backend/onednn/amx_conv.hpp, as
# committed with this record) through library_kernel.cpp, the probe's
# harness with the probe's kernel replaced by amx::Forward3x3: with the
# statistics, then (NOSTATS=1) without them, each plain and (PROLOGUE=1)
# with the batch norm's map against an apply pass before oneDNN's; the
# oneDNN column always includes the statistics pass. 2 threads.
#   bash run_library.sh <repo-root> > library_kernel.txt
set -euo pipefail
ROOT=$1
HERE=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=2
date -u; lscpu | grep -E 'Model name|^CPU family|^Model:'
g++ -O2 -std=c++17 -fopenmp -march=sapphirerapids -I"$ROOT/include" "$HERE/library_kernel.cpp" -ldnnl -o /tmp/amx_library_kernel
for cfg in "X=1" "PROLOGUE=1" "NOSTATS=1" "NOSTATS=1 PROLOGUE=1" "X=1" "NOSTATS=1 PROLOGUE=1"; do
  echo "== $cfg"
  env $cfg /tmp/amx_library_kernel
done
date -u
