#!/usr/bin/env bash
# The ranged-backward probe: three runs. 2 threads.
#   bash run.sh <repo-root> > ranged_probe.txt
set -euo pipefail
ROOT=$1
HERE=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=2
date -u; lscpu | grep -E 'Model name|^CPU family|^Model:'; git -C "$ROOT" rev-parse HEAD
g++ -O2 -std=c++17 -fopenmp -march=sapphirerapids -I"$ROOT/include" "$HERE/ranged_probe.cpp" -ldnnl -o /tmp/ranged_probe
for r in 1 2 3; do
  echo "== run $r"
  /tmp/ranged_probe
done
date -u
