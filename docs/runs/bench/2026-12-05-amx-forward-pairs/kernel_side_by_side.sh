#!/usr/bin/env bash
# amx::Forward3x3 at ResNet's 16 -> 16 (32x32, batch 128, 2 threads) built
# from two include/ trees (OLD: 0683136's, block<4,1>; NEW: this commit's,
# block_pairs with the paired epilogue) through the harness of ../2026-12-05-s15-probes/
# (amx_conv_harness.patch over the 2026-12-04 probe's library_kernel.cpp),
# the two alternated, 4 rounds: as the step runs it (the batch norm's map, no
# statistics) and with the statistics epilogue (no map). The harness's
# oneDNN column is left out here. Usage: bash kernel_side_by_side.sh <old include> <new include>
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
P="$HERE/../2026-12-05-s15-probes"
cp "$P/../2026-12-04-amx-conv-probe/library_kernel.cpp" "$T/amx_conv_harness.cpp"
patch -s "$T/amx_conv_harness.cpp" < "$P/amx_conv_harness.patch"
for v in old new; do
  inc=$([ $v = old ] && echo "$1" || echo "$2")
  g++ -O2 -std=c++17 -fopenmp -march=sapphirerapids -I"$inc" "$T/amx_conv_harness.cpp" -ldnnl -o "$T/$v"
done
export OMP_NUM_THREADS=2
date -u; lscpu | grep -E 'Model name|^CPU family|^Model:'
for round in 1 2 3 4; do
  for v in old new; do
    for cfg in "NOSTATS=1 PROLOGUE=1" "X=1"; do
      echo "round $round $v [$cfg] $(env $cfg "$T/$v" | grep -o 'max |own - oneDNN| [0-9.]*\|warm: own AMX conv + stats epilogue [0-9.]* ms\|cold: own AMX conv + stats epilogue [0-9.]* ms' | sed 's/own AMX conv + stats epilogue/own/' | tr '\n' ' ')"
    done
  done
done
date -u
rm -rf "$T"
