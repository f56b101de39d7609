#!/usr/bin/env bash
# The main job: sets everything up, builds examples/resnet_cifar10, trains the
# CIFAR-10 ResNet and reports its test accuracy.
#
#   bash scripts/run_main.sh                                  # no data: built-in synthetic demo (~1-2 min)
#   bash scripts/run_main.sh --data-dir DIR/cifar-10-batches-bin   # real CIFAR-10: ResNet-20, 30 epochs
#   bash scripts/run_main.sh --data-dir DIR [any resnet_cifar10 flag]  # e.g. --num-layers 56 --epochs 60
#
# Without --data-dir the program explains how to get CIFAR-10 and trains on a
# small synthetic set (labelled as such in its output): first half the steps,
# then a second run that resumes from the checkpoint, then the evaluation.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
bash scripts/setup.sh
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$BUILD" --target resnet_cifar10 -j "$(nproc)"
bin="$BUILD/examples/resnet_cifar10/resnet_cifar10"

if [[ " $* " == *" --data-dir "* || " $* " == *" --data-dir="* ]]; then
  job=${JOB_DIR:-runs/resnet20}
  echo "== Training ResNet-20 on CIFAR-10 (checkpoints and TensorBoard events in $job; rerun to resume)"
  exec "$bin" --job-dir "$job" --num-gpus 0 --num-layers 20 --epochs 30 --schedule cosine \
    --train-split train_all --save-checkpoints-steps 1000 --eval-every 2000 "$@"
fi

job=${JOB_DIR:-runs/synthetic-demo}
rm -rf "$job"
echo "== No --data-dir: synthetic demo. Part 1: train ResNet-8 for 150 steps, checkpoint"
"$bin" --job-dir "$job" --num-gpus 0 --num-layers 8 --train-steps 150 --batch-norm-decay 0.9 "$@"
echo "== Part 2: a new process resumes from the checkpoint, trains to step 300, evaluates"
"$bin" --job-dir "$job" --num-gpus 0 --num-layers 8 --train-steps 300 --batch-norm-decay 0.9 "$@"
