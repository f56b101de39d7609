#!/bin/bash
# More rounds of the kernels alone: the previous binary and this one
# alternated. Usage: run_kernels.sh OLD_BUILD NEW_BUILD
old=$1 new=$2
date -u
for r in 1 2 3 4 5 6 7 8; do
  for b in "$old" "$new"; do
    echo "== round $r $b conv_passes_bench --reps 21"
    "$b/bench/conv_passes_bench" --reps 21 | grep "@"
  done
done
date -u
