#!/usr/bin/env bash
# The own AMX forward kernel against oneDNN's bf16 forward, both without
# the statistics (NOSTATS=1 NOSTATSPASS=1), plain and with the batch norm's
# map (PROLOGUE=1: the own kernel's prologue against an apply pass before
# oneDNN's), alternated. 2 threads.
#   bash run.sh <repo-root> > own_vs_onednn.txt
set -euo pipefail
ROOT=$1
HERE=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=2
date -u; lscpu | grep -E 'Model name|^CPU family|^Model:'
g++ -O2 -std=c++17 -fopenmp -march=sapphirerapids -I"$ROOT/include" "$HERE/own_vs_onednn.cpp" -ldnnl -o /tmp/own_vs_onednn
for cfg in "NOSTATS=1 NOSTATSPASS=1" "NOSTATS=1 NOSTATSPASS=1" "NOSTATS=1 NOSTATSPASS=1"; do
  echo "== $cfg"
  env $cfg /tmp/own_vs_onednn
done
date -u
