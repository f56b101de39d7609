#!/usr/bin/env bash
# The own Winograd kernels in place of oneDNN's AVX-512 Winograd on a Zen 4
# (AVX-512 in 256-bit halves), side by side with the previous code:
#   1. probes/vgg_wino.cpp (VGG-19's 3x3 convolutions, one 250x333 image,
#      forward and data gradient) built on 66d8049's headers and on this
#      commit's, alternated, ROUNDS rounds -> vgg_wino.txt
#   2. style_transfer_bench built at 66d8049 (BASE) and at this commit (NEW),
#      fp32 and bf16, alternated, ROUNDS rounds -> gatys_ab.txt
# Usage: [OUT=dir] run.sh BASE_INCLUDE_DIR BASE_BENCH NEW_BENCH [ROUNDS] (logs into OUT, default this folder)
# (BASE_INCLUDE_DIR: `git archive 66d8049 include | tar -x -C dir`, then dir/include)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
base_inc=$1 base=$2 new=$3 rounds=${4:-5}
out=${OUT:-$here}
mkdir -p "$out"
tmp=$(mktemp -d)
for v in base new; do
  inc=$base_inc; [ $v = new ] && inc=$root/include
  g++ -O3 -march=native -std=c++17 -fopenmp -I "$inc" -I /usr/include/eigen3 "$here/probes/vgg_wino.cpp" \
    -o "$tmp/vgg_wino_$v" -ldnnl
done
{ lscpu | grep -E "Model name|CPU family|^Model:"; uptime; } > "$out/vgg_wino.txt"
for r in $(seq "$rounds"); do
  for v in base new; do
    echo "== round $r $v" >> "$out/vgg_wino.txt"
    OMP_NUM_THREADS=2 "$tmp/vgg_wino_$v" >> "$out/vgg_wino.txt"
  done
done
{ lscpu | grep -E "Model name|CPU family|^Model:"; uptime; } > "$out/gatys_ab.txt"
for r in $(seq "$rounds"); do
  for p in fp32 bf16; do
    for v in base new; do
      b=$base; [ $v = new ] && b=$new
      echo "== round $r $p $v" >> "$out/gatys_ab.txt"
      OMP_NUM_THREADS=2 "$b" --format nhwc --reps 5 --warmup 2 --precision $p >> "$out/gatys_ab.txt" 2>&1
    done
  done
done
rm -rf "$tmp"
