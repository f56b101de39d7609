#!/usr/bin/env bash
# bf16 convolutions with Winograd chosen in the own float Winograd kernels on
# a Zen 4 (ops::Conv2d::float_winograd_in_bf16), side by side with 6ff2ca1:
#   1. probes/vgg_bf16.cpp (VGG-19's 3x3 convolutions, one 250x333 image,
#      ConvAlgorithm::Auto, fp32 and bf16 ops, forward and data gradient)
#      built on 6ff2ca1's headers and on this tree's, alternated -> vgg_bf16.txt
#   2. style_transfer_bench at 6ff2ca1 (BASE) and this tree's (NEW), bf16 and
#      fp32 (a control: unchanged code), alternated, ROUNDS rounds -> gatys_ab.txt
# Usage: [OUT=dir] run.sh BASE_INCLUDE_DIR BASE_BENCH NEW_BENCH [ROUNDS]
# (BASE_INCLUDE_DIR: a worktree of 6ff2ca1, its include/)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
base_inc=$1 base=$2 new=$3 rounds=${4:-5}
out=${OUT:-$here}
mkdir -p "$out"
tmp=$(mktemp -d)
for v in base new; do
  inc=$base_inc; [ $v = new ] && inc=$root/include
  g++ -O3 -march=native -std=c++17 -fopenmp -I "$inc" -I /usr/include/eigen3 "$here/probes/vgg_bf16.cpp" \
    -o "$tmp/vgg_bf16_$v" -ldnnl
done
{ lscpu | grep -E "Model name|CPU family|^Model:"; uptime; date -u; } > "$out/vgg_bf16.txt"
for r in 1 2 3; do
  for v in base new; do
    echo "== round $r $v" >> "$out/vgg_bf16.txt"
    OMP_NUM_THREADS=2 "$tmp/vgg_bf16_$v" >> "$out/vgg_bf16.txt"
  done
done
{ lscpu | grep -E "Model name|CPU family|^Model:"; uptime; date -u; } > "$out/gatys_ab.txt"
for r in $(seq "$rounds"); do
  for p in bf16 fp32; do
    for v in base new; do
      b=$base; [ $v = new ] && b=$new
      echo "== round $r $p $v" >> "$out/gatys_ab.txt"
      OMP_NUM_THREADS=2 "$b" --format nhwc --reps 5 --warmup 2 --precision $p >> "$out/gatys_ab.txt" 2>&1
    done
  done
done
date -u >> "$out/gatys_ab.txt"
rm -rf "$tmp"
