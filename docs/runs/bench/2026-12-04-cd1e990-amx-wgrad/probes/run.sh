#!/usr/bin/env bash
# The AMX weight-gradient kernel alone (amx::WeightGrad::run on random bf16
# data, median of 7 calls after 2), at airbench94's (batch 500) and
# ResNet-20's (batch 128) geometries, two threads:
#   old: db152db's amx_wgrad.hpp with knobs.patch (environment variables
#        WG_KSUB, WG_BLOCK_KB, WG_CHUNKS, WG_NOPROD, WG_NOCOPY for the
#        probe only; unset, the kernel is db152db's);
#   new: cd1e990's amx_wgrad.hpp as committed.
# Run from the repository root: bash <this dir>/run.sh > <this dir>/wg_probe.txt
set -euo pipefail
P=$(dirname "$0")
T=$(mktemp -d)
git show db152db:include/cifarnet/backend/onednn/amx_wgrad.hpp > "$T/old.hpp"
sed -i 's/namespace amx {/namespace amxexp {/; s/}  \/\/ namespace amx$/}  \/\/ namespace amxexp/' "$T/old.hpp"
patch -s "$T/old.hpp" < "$P/knobs.patch"
git show cd1e990:include/cifarnet/backend/onednn/amx_wgrad.hpp > "$T/new.hpp"
sed -i 's/namespace amx {/namespace amxexp {/; s/}  \/\/ namespace amx$/}  \/\/ namespace amxexp/' "$T/new.hpp"
for v in old new; do
  sed "s/amx_wgrad_new.hpp/$v.hpp/" "$P/wg_probe.cpp" > "$T/probe_$v.cpp"
  g++ -std=c++17 -O3 -march=native -fopenmp -Iinclude -I"$T" "$T/probe_$v.cpp" -o "$T/probe_$v"
done
export OMP_NUM_THREADS=2
date -u
echo "== old (db152db), defaults"; "$T/probe_old"
for k in 512 100000; do for b in 640 1024; do
  echo "== old, WG_KSUB=$k WG_BLOCK_KB=$b"; WG_KSUB=$k WG_BLOCK_KB=$b "$T/probe_old" ab
done; done
echo "== old, WG_KSUB=100000 WG_BLOCK_KB=1024 WG_NOPROD=1 (copies and partial sums only)"; WG_KSUB=100000 WG_BLOCK_KB=1024 WG_NOPROD=1 "$T/probe_old" ab
echo "== old, WG_KSUB=100000 WG_BLOCK_KB=1024 WG_NOCOPY=1 (products and partial sums only)"; WG_KSUB=100000 WG_BLOCK_KB=1024 WG_NOCOPY=1 "$T/probe_old" ab
for r in 1 2 3; do
  echo "== round $r old, WG_KSUB=100000 (ResNet-20's geometries, the strided ones among them)"; WG_KSUB=100000 "$T/probe_old" rn
  echo "== round $r old, defaults"; "$T/probe_old" rn
done
for r in 1 2 3; do echo "== round $r old"; "$T/probe_old"; echo "== round $r new"; "$T/probe_new"; done
date -u
rm -rf "$T"
