#!/usr/bin/env bash
# cifar10_multi_gpu_train against cifar10_train on the same batches (CPU
# towers here: this test runs without a GPU): with --num_gpus 1 the step log
# equals cifar10_train's line for line; with --num_gpus 2 --batch_size 32
# the towers split each 64-image batch that cifar10_train --batch_size 64
# takes whole, and the update is the same up to the order of the gradient
# sums (the printed losses, two decimals, within 0.01). Then --use_fp16 says
# what it maps to on this CPU, and --num_gpus 0 is refused.
# Usage: multi_gpu_train.sh <cifar10_train> <cifar10_multi_gpu_train> <data dir> <work dir>
set -euo pipefail
TRAIN=$1 MGPU=$2 DATA=$3 WORK=$4
rm -rf "$WORK"
mkdir -p "$WORK"
base=(--data_dir "$DATA" --log_frequency 3 --seed 5 --num_preprocess_threads 0)
common=("${base[@]}" --max_steps 12)
losses() { grep -o "step [0-9]*, loss = [0-9.]*" "$1"; }

"$TRAIN" "${common[@]}" --train_dir "$WORK/one64" --batch_size 64 > "$WORK/one64.log"
"$TRAIN" "${common[@]}" --train_dir "$WORK/one32" --batch_size 32 > "$WORK/one32.log"
"$MGPU" "${common[@]}" --train_dir "$WORK/m1" --batch_size 32 --num_gpus 1 > "$WORK/m1.log"
"$MGPU" "${common[@]}" --train_dir "$WORK/m2" --batch_size 32 --num_gpus 2 > "$WORK/m2.log"
grep -q "Tutorial CNN in 2 tower(s) of batch 32 on the CPU" "$WORK/m2.log" ||
  { echo "FAIL: no line naming 2 CPU towers"; cat "$WORK/m2.log"; exit 1; }
[ "$(losses "$WORK/one64.log" | wc -l)" = 4 ] || { echo "FAIL: expected 4 log lines"; cat "$WORK/one64.log"; exit 1; }

if ! diff <(losses "$WORK/one32.log") <(losses "$WORK/m1.log"); then
  echo "FAIL: one tower differs from cifar10_train"
  exit 1
fi
paste <(losses "$WORK/one64.log") <(losses "$WORK/m2.log") | awk '
  { split($0, a, "\t"); n1 = split(a[1], x, " "); n2 = split(a[2], y, " ");
    d = x[n1] - y[n2]; if (d < 0) d = -d;
    printf "%s | %s\n", a[1], a[2];
    if (x[2] != y[2] || d > 0.0100001) bad = 1 }
  END { exit bad }' || { echo "FAIL: two towers of 32 differ from one model of 64"; exit 1; }

"$MGPU" "${base[@]}" --train_dir "$WORK/fp16" --batch_size 32 --num_gpus 2 --max_steps 3 --use_fp16 \
  > "$WORK/fp16.log"
grep -Eq "bf16 convolutions|neither float16 arithmetic nor bf16 kernels" "$WORK/fp16.log" ||
  { echo "FAIL: --use_fp16 does not say what it maps to"; cat "$WORK/fp16.log"; exit 1; }
set +e
"$MGPU" --num_gpus 0 --train_dir "$WORK/zero" > "$WORK/zero.log" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q -- "--num_gpus must be >= 1" "$WORK/zero.log" ||
  { echo "FAIL: --num_gpus 0 gave exit $rc"; cat "$WORK/zero.log"; exit 1; }
echo "PASS"
