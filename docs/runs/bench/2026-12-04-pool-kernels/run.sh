#!/usr/bin/env bash
# The own pooling kernels with a constant channel count (and AVX-512 for
# bf16 max pooling), side by side with the library before (b9774ff):
# - pool_probe.cpp: ResNet-20's shortcut average pools alone (a copy of the
#   header before, old_avg_pool.hpp, against the library's), pool_probe.txt;
# - mp_probe.cpp: airbench94's max pools at batch 2000 alone (a copy of the
#   header before, old_max_pool.hpp made by sed below, against the
#   library's), mp_probe.txt;
# - the ResNet-20/56 bf16 and fp32 steps (cifarnet_bench of each tree, 5
#   alternated rounds, one process each), ab_resnet.txt;
# - the airbench94 bf16 step at batch 2000, whitening frozen (sr_prof.cpp of
#   docs/runs/bench/2026-12-04-airbench-bf16-alone-rules/
#   built against each tree, 5 alternated rounds), ab_airbench.txt.
# Run from the repository root; OLD is a checkout of b9774ff with its
# build/bench/cifarnet_bench built, NEW this tree with its build.
set -euo pipefail
P=$(dirname "$0")
OLD=${OLD:?a checkout of b9774ff}
NEW=${NEW:-.}
build() {  # $1: source, $2: include dir, $3: output
  g++ -std=c++17 -O3 -DNDEBUG -fopenmp -march=native -I"$2/include" -isystem /usr/include/eigen3 -I"$T" "$1" -o "$3" \
    /usr/lib/x86_64-linux-gnu/libdnnl.so.2.6 /usr/lib/x86_64-linux-gnu/libopenblas.so
}
T=$(mktemp -d)
sed -e 's/namespace max_pool {/namespace max_pool_old {/' -e 's/#pragma once//' \
  "$OLD/include/cifarnet/backend/onednn/max_pool_kernels.hpp" > "$T/old_max_pool.hpp"
sed -e 's/namespace avg_pool {/namespace avg_pool_old {/' -e 's/#pragma once//' \
  "$OLD/include/cifarnet/backend/onednn/avg_pool_kernels.hpp" > "$T/old_avg_pool.hpp"
build "$P/pool_probe.cpp" "$NEW" "$T/pool_probe"
build "$P/mp_probe.cpp" "$NEW" "$T/mp_probe"
SR="$P/../2026-12-04-airbench-bf16-alone-rules/sr_prof.cpp"  # the probe of that entry
build "$SR" "$OLD" "$T/sr_old"
build "$SR" "$NEW" "$T/sr_new"
export OMP_NUM_THREADS=2
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-200 > "$P/machine.txt"
{ date -u; "$T/pool_probe"; "$T/pool_probe"; } > "$P/pool_probe.txt"
{ date -u; "$T/mp_probe"; "$T/mp_probe"; } > "$P/mp_probe.txt"
: > "$P/ab_resnet.txt"
for r in 1 2 3 4 5; do for v in old new; do
  B=$([ $v = old ] && echo "$OLD" || echo "$NEW")/build/bench/cifarnet_bench
  for prec in bf16 fp32; do
    echo "$v $r $prec $(date -u +%H:%M:%S)" >> "$P/ab_resnet.txt"
    "$B" --only resnet20,resnet56 --formats nhwc --precision $prec --profile 0 --reps 5 | grep img/s >> "$P/ab_resnet.txt"
  done
done; done
: > "$P/ab_airbench.txt"
for r in 1 2 3 4 5; do for v in old new; do
  echo "$v $r $(date -u +%H:%M:%S) $("$T/sr_$v" 2000 0 3 | head -1)" >> "$P/ab_airbench.txt"
done; done
"$T/sr_new" 2000 0 3 > "$P/profile_airbench_new.txt"
"$T/sr_old" 2000 0 3 > "$P/profile_airbench_old.txt"
