#!/usr/bin/env bash
# tests/examples/smoke_resnet.sh — resnet_cifar10 end to end on a tiny data
# set in the CIFAR-10 binary layout:
#   smoke_resnet.sh <resnet_cifar10> <data_dir> <work_dir>
# ResNet-8 for 20 steps (log, checkpoint, accuracy), then again to step 40:
# it must resume at step 20 with a lower loss than at step 1, and evaluate.
set -u
source "$(dirname "$0")/smoke_lib.sh"
[ $# -eq 3 ] || fail "usage: smoke_resnet.sh <resnet_cifar10> <data_dir> <work_dir>"
resnet=$1 data=$2 work=$3
rm -rf "$work" && mkdir -p "$work" || fail "cannot create $work"
job=$work/job
args=(--data-dir "$data" --job-dir "$job" --num-gpus 0 --num-layers 8 --train-batch-size 16 --eval-batch-size 50
  --data-format channels_last --seed 1)

run "$work/run1.log" "$resnet" "${args[@]}" --train-steps 20 || fail "the first run exited with $?"
need "$work/run1.log" '^ResNet-8 \(' "the model summary line"
need "$work/run1.log" '^step = 1, loss = [0-9.]+, learning_rate = 0.1 ' "the loss line of step 1"
need "$work/run1.log" '^Average examples/sec: [0-9.]+ \([0-9.]+\), step = 20$' "the examples/sec line of step 20"
need "$work/run1.log" "^Saved checkpoint $job/model.ckpt-20.safetensors$" "a checkpoint at step 20"
[ -s "$job/model.ckpt-20.safetensors" ] || fail "model.ckpt-20.safetensors is missing"
need "$work/run1.log" '^accuracy = 0\.[0-9]{4}, loss = [0-9.]+, global_step = 20 \([0-9]+/200 correct\)$' "the accuracy at step 20"
first=$(number_at "$work/run1.log" '^step = 1, loss = ([0-9.]+),.*$')

run "$work/run2.log" "$resnet" "${args[@]}" --train-steps 40 || fail "the resumed run exited with $?"
need "$work/run2.log" "^Restored $job/model.ckpt-20.safetensors \(global step 20\)$" "a restore of step 20"
need "$work/run2.log" '^step = 21, loss = ' "training continuing at step 21"
grep -q '^step = 1, ' "$work/run2.log" && fail "the resumed run started again at step 1"
need "$work/run2.log" '^Trained steps 20\.\.40 in ' "training from step 20 to 40"
need "$work/run2.log" '^accuracy = 0\.[0-9]{4}, loss = [0-9.]+, global_step = 40 \([0-9]+/200 correct\)$' "the accuracy at step 40"
resumed=$(number_at "$work/run2.log" '^step = 21, loss = ([0-9.]+),.*$')
less "$resumed" "$first" 0.3 || fail "the loss did not fall: $first at step 1, $resumed at step 21"
echo "loss: $first at step 1, $resumed at step 21"
ls "$job"/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard event file in $job"

run "$work/run3.log" "$resnet" "${args[@]}" --train-steps 40 || fail "the third run exited with $?"
need "$work/run3.log" '^Already trained to step 40 \(--train-steps 40\): evaluating only\.$' "a run with nothing left to train"
echo "PASS"
