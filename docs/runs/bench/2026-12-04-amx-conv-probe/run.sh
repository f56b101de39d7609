#!/usr/bin/env bash
# An own AMX forward convolution (amx_conv_probe.cpp: 3x3, stride 1,
# padding 1, NHWC bf16 in and out, the batch norm's per-channel sum and sum
# of squares of the bf16 output summed in its epilogue) against oneDNN
# 2.6's bf16 forward plus a statistics pass over its output, ResNet-20's
# three stride-1 stage shapes at batch 128, 2 threads, warm and after a
# 256 MB write. Knobs (environment): OVERLAP=1 reads the 16-channel input
# as rows of two neighbouring pixels in place (32 bytes apart; unset: each
# pixel's three horizontal taps copied into 64 channels); GROUP=g images
# stacked per pass (one zero row between images). Then micro.cpp: cycles (TSC) per
# tile product of the 2x2 loop with 64-byte aligned operands (modes: 0 the
# loop, 1 another load order, 2 2x1 double-buffered, 3 no loads, 4 loads
# only, 5 A loads only), then with both operands 16 and 32 bytes off a
# 64-byte boundary.
#   bash run.sh <repo-root> > probe.txt
set -euo pipefail
ROOT=$1
HERE=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=2
date -u; lscpu | grep -E 'Model name|^CPU family|^Model:'
g++ -O2 -std=c++17 -fopenmp -march=sapphirerapids -I"$ROOT/include" "$HERE/amx_conv_probe.cpp" -ldnnl -o /tmp/amx_conv_probe
g++ -O2 -std=c++17 -march=sapphirerapids -I"$ROOT/include" "$HERE/micro.cpp" -o /tmp/amx_micro
for cfg in "GROUP=8" "OVERLAP=1 GROUP=8" "OVERLAP=1 GROUP=2" "OVERLAP=1 GROUP=16" "OVERLAP=1 GROUP=8" "GROUP=8"; do
  echo "== $cfg"
  env $cfg /tmp/amx_conv_probe
done
for m in 0 1 2 3 4 5; do for kc in 32 64; do echo -n "mode $m: "; /tmp/amx_micro 18 $kc 20000 $m 20 | tail -1; done; done
for skew in 16 32; do for m in 0 4; do echo -n "mode $m: "; /tmp/amx_micro 18 32 20000 $m 20 $skew | tail -1; done; done
date -u
