#!/usr/bin/env bash
# The airbench94 bf16 step as the speedrun runs it after its whitening-bias
# epochs (batch 2000, whitening weights and bias frozen, random data),
# 4c34bd6's library ("old") against the working tree of a56ff76 at three
# stages ("new"): bn_bf16_output_alone between standalone layers alone
# (ab_rule_1_only.txt), with conv_gelu_bf16_output too
# (ab_rules_1_and_3.txt, profile_old_vs_rules_1_and_3.txt), and with
# pool_bf16_output_to_bn too, as committed (ab_all_three.txt).
# sr_prof.cpp prints the median of 5 repetitions of 3 steps after 3 warm-up
# steps, then a per-layer profile of 3 more; the A/B files alternate the two
# binaries, one process each. whiten_probe.cpp times the whitening's three
# passes as the step ran them against one convolution with its bias and GELU
# as post-ops writing bf16 (whiten_probe.txt), and counts the equal bits.
# Run from the repository root; OLD and NEW are checkouts of the two trees.
set -euo pipefail
P=$(dirname "$0")
OLD=${OLD:?a checkout of 4c34bd6}
NEW=${NEW:-.}
build() {  # $1: source, $2: include dir, $3: output
  g++ -std=c++17 -O3 -DNDEBUG -fopenmp -march=native -I"$2/include" -isystem /usr/include/eigen3 "$1" -o "$3" \
    /usr/lib/x86_64-linux-gnu/libdnnl.so.2.6 /usr/lib/x86_64-linux-gnu/libopenblas.so
}
T=$(mktemp -d)
build "$P/sr_prof.cpp" "$OLD" "$T/old"
build "$P/sr_prof.cpp" "$NEW" "$T/new"
build "$P/whiten_probe.cpp" "$NEW" "$T/whiten"
export OMP_NUM_THREADS=2
for r in 1 2 3 4 5; do for v in old new; do
  echo "$v $r $(date -u +%H:%M:%S) $("$T/$v" 2000 0 3 | head -1)"
done; done
"$T/whiten"
rm -rf "$T"
