#!/usr/bin/env bash
# This session's probes (docs/BENCHMARKS.md, 2026-12-05 15:28): each harness
# built against a copy of the repository's include/ at commit 0683136 with
# the matching *.probe.patch applied (the probes' environment switches), 2
# threads, nothing else running. Usage: bash run.sh <repo root at 0683136> > probes.txt
set -euo pipefail
ROOT=$1
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
cp -r "$ROOT/include" "$T/"
for p in "$HERE"/*.probe.patch; do patch -s -d "$T" -p1 < "$p"; done
CXX="g++ -O3 -march=native -fopenmp -std=c++17 -I$T/include -I/usr/include/eigen3"
export OMP_NUM_THREADS=2
date -u; lscpu | grep -E 'Model name|^CPU family|^Model:|L2|L3'
# the harness: the 2026-12-04 probe's library_kernel.cpp with amx_conv_harness.patch
cp "$HERE/../2026-12-04-amx-conv-probe/library_kernel.cpp" "$T/amx_conv_harness.cpp"
patch -s "$T/amx_conv_harness.cpp" < "$HERE/amx_conv_harness.patch"
$CXX "$T/amx_conv_harness.cpp" -ldnnl -o "$T/conv"
echo "== amx::Forward3x3, 16 -> 16 at 32x32, batch 128, with the map (PROLOGUE), no statistics (NOSTATS): ms"
for round in 1 2; do
  for cfg in "" "SKIPSTACK=1" "SKIPTILES=1" "SKIPEPI=1" "SKIPSTACK=1 SKIPEPI=1" \
             "PARITY=1" "PARITY=1 SKIPEPI=1" "PARITY=1 SKIPSTACK=1 SKIPEPI=1" \
             "PARITY=1 PIPE=1" "PARITY=1 PIPE=1 PREF=1" "PARITY=1 PIPE=1 SKIPSTACK=1" \
             "PARITY=1 PIPE=1 SKIPSTACK=1 EPIL1=1"; do
    echo "round $round [${cfg:-block<4,1>}] $(env NOSTATS=1 PROLOGUE=1 $cfg "$T/conv" |
      grep -o 'max |own - oneDNN| [0-9.]*\|warm: own AMX conv + stats epilogue [0-9.]* ms\|cold: own AMX conv + stats epilogue [0-9.]* ms\|oneDNN conv + stats pass [0-9.]* ms' |
      sed 's/own AMX conv + stats epilogue/own/; s/oneDNN conv + stats pass/oneDNN conv/' | tr '\n' ' ')"
  done
done
$CXX "$HERE/wgrad_dymap_harness.cpp" -o "$T/fuse"
echo "== the batch norm's bf16 input gradient in the AMX weight gradient's copy of dy (DyMap) against input_gradient + WeightGrad::run"
"$T/fuse"; "$T/fuse"
$CXX "$HERE/bn_dynamic_harness.cpp" -o "$T/ig"
echo "== bn::input_gradient<16> (bf16 in and out, ReLU), 128x32x32x16: static halves (DYN=0) against dynamic chunks of DYN rows"
for d in 0 1024 4096 0 1024 4096; do echo "DYN=$d $(DYN=$d "$T/ig" | tr '\n' ' ')"; done
$CXX "$HERE/avg_pool_harness.cpp" -o "$T/pool"
echo "== avg_pool::forward 2x2/2, bf16 in, into a channel-padded float output: without (PF unset) and with a prefetch PF bytes ahead of each output row's input rows"
for pf in "" 2048 8192 16384 "" 2048 8192 16384; do echo "PF=${pf:-none} $(if [ -n "$pf" ]; then PF=$pf "$T/pool"; else "$T/pool"; fi | tr '\n' ' ')"; done
g++ -O2 -fopenmp -march=native "$HERE/bandwidth.cpp" -o "$T/bw"
echo "== read and copy bandwidth by working-set size (medians of 12 passes over the same buffer), 2 threads, then 1"
"$T/bw"; OMP_NUM_THREADS=1 "$T/bw"
date -u
rm -rf "$T"
