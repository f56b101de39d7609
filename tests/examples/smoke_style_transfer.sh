#!/usr/bin/env bash
# Smoke run of style_transfer (ctest: examples.style_transfer_...): writes the
# test-size VGG-19 .mat (--make-test-mat: VGG-19's 43 layers, random
# weights, channels / 16), runs 10 Adam iterations on a 48x64 image with it,
# and checks the seed's log (steps 1-5 and 10), that the loss fell from
# step 1 to step 10, that outputs/9.png (the seed's 0-based name of the
# 10th iteration) decodes as a 64x48 RGB image, and that a checkpoint was
# written at the end; then the same 10 iterations with --precision bf16
# (bf16 convolutions and Gram products where the CPU has them, which it
# says): the loss falls there too.
# Usage: smoke_style_transfer.sh <style_transfer> <png_info> <work dir>
set -u
prog=$1 png_info=$2 work=$3
. "$(dirname "$0")/smoke_lib.sh"
rm -rf "$work" && mkdir -p "$work"
mat=$work/vgg19_test.mat

run "$work/make.log" "$prog" --make-test-mat "$mat" || fail "--make-test-mat exited with $?"
need "$work/make.log" "^wrote $mat: imagenet-vgg-verydeep-19.mat's 43 layers with RANDOM conv weights" "--make-test-mat's report"
[ -s "$mat" ] || fail "--make-test-mat wrote no $mat"

run "$work/run.log" "$prog" --vgg-mat "$mat" --output-dir "$work/out" --iterations 10 --height 48 --width 64 \
  --fresh || fail "style_transfer exited with $?"
for s in 1 2 3 4 5 10; do need "$work/run.log" "^Step $s$" "the seed's report of step $s"; done
need "$work/run.log" "^done: step 10, 10 iterations this run" "the final line"
loss_at() { awk -v s="$1" '$1 == "Step" { cur = $2 } $1 == "Loss:" && cur == s { print $2; exit }' "$work/run.log"; }
first=$(loss_at 1) last=$(loss_at 10)
echo "loss: step 1 $first, step 10 $last"
less "$last" "$first" 0 || fail "the loss did not fall from step 1 ($first) to step 10 ($last)"

png=$work/out/outputs/9.png
[ -f "$png" ] || fail "no $png"
info=$("$png_info" "$png") || fail "$png does not decode: $info"
echo "$png: $info (width height channels mean)"
set -- $info
[ "$1 $2 $3" = "64 48 3" ] || fail "$png is $1x$2 with $3 channels, expected 64x48 RGB"
ls "$work/out/checkpoints" | grep -q "\.safetensors$" || fail "no checkpoint in $work/out/checkpoints"

run "$work/bf16.log" "$prog" --vgg-mat "$mat" --output-dir "$work/out_bf16" --iterations 10 --height 48 \
  --width 64 --fresh --precision bf16 || fail "style_transfer --precision bf16 exited with $?"
need "$work/bf16.log" "^--precision bf16" "the arithmetic line of --precision bf16"
need "$work/bf16.log" "^done: step 10, 10 iterations this run" "the final line of --precision bf16"
bf_first=$(awk '$1 == "Step" { cur = $2 } $1 == "Loss:" && cur == 1 { print $2; exit }' "$work/bf16.log")
bf_last=$(awk '$1 == "Step" { cur = $2 } $1 == "Loss:" && cur == 10 { print $2; exit }' "$work/bf16.log")
echo "--precision bf16 loss: step 1 $bf_first, step 10 $bf_last"
less "$bf_last" "$bf_first" 0 || fail "--precision bf16: the loss did not fall from step 1 ($bf_first) to step 10 ($bf_last)"
echo "PASS: 10 iterations, loss $first -> $last, $png decodes as 64x48 RGB; bf16 loss $bf_first -> $bf_last"
