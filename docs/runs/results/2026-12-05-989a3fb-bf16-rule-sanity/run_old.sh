#!/usr/bin/env bash
# The bf16 run of run.sh with 05a30f2's resnet_cifar10 (before the rule fired
# in bf16), the same flags and seed; 2 threads.
#   bash run_old.sh <05a30f2-build-dir> <cifar-10-batches-bin> > log_05a30f2.txt
set -euo pipefail
B=$1 DATA=$2
export OMP_NUM_THREADS=2
date -u; lscpu | grep -E 'Model name|^CPU family|^Model:'
echo "== precision bf16 (05a30f2)"
job=$(mktemp -d)
"$B/examples/resnet_cifar10/resnet_cifar10" --data-dir "$DATA" --job-dir "$job" --num-gpus 0 --num-layers 20 \
  --epochs 2 --precision bf16 --eval-every 391 2>&1 | grep -vE "examples/sec"
rm -rf "$job"
date -u
