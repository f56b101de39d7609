#!/usr/bin/env bash
# A sanity check of bn_output_into_next_conv in bf16 in real training: ResNet-20
# on CIFAR-10 for 2 epochs (piecewise schedule of the seed, scaled), bf16
# (the rule fires in 9 of 9 block pairs on an AMX CPU) against fp32 (which
# this session did not change), the same seed; 2 threads.
#   bash run.sh <build-dir> <cifar-10-batches-bin> > log.txt
set -euo pipefail
B=$1 DATA=$2
export OMP_NUM_THREADS=2
date -u; lscpu | grep -E 'Model name|^CPU family|^Model:'
for p in bf16 fp32; do
  echo "== precision $p"
  job=$(mktemp -d)
  "$B/examples/resnet_cifar10/resnet_cifar10" --data-dir "$DATA" --job-dir "$job" --num-gpus 0 --num-layers 20 \
    --epochs 2 --precision $p --eval-every 391 2>&1 | grep -vE "examples/sec" 
  rm -rf "$job"
done
date -u
