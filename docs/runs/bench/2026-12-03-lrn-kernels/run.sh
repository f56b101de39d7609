#!/usr/bin/env bash
# The tutorial CNN's training (examples/cifar10_cnn/cifar10_train) before and
# after LRN's own loops, alternated, on the tests' tiny CIFAR-10 set:
#   run.sh <old cifar10_train> <new cifar10_train> <data dir> <rounds>
# Prints each run's "Trained steps" line (examples/sec over the run).
set -euo pipefail
old=$1 new=$2 data=$3 rounds=${4:-3}
for r in $(seq 1 "$rounds"); do
  for threads in 1 2; do
    for batch in 32 128; do
      for which in old new; do
        bin=$old
        [ $which = new ] && bin=$new
        dir=$(mktemp -d)
        line=$(OMP_NUM_THREADS=$threads "$bin" --data_dir "$data" --train_dir "$dir" --batch_size $batch \
          --log_frequency 1000 --seed 1 --max_steps 40 2>&1 | grep '^Trained steps')
        rm -rf "$dir"
        echo "round $r threads $threads batch $batch $which: $line"
      done
    done
  done
done
