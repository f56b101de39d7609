#!/usr/bin/env bash
# The installed package config's CUDA component: with NCCL, cifarnet::cuda
# links NCCL::nccl and defines CIFARNET_WITH_NCCL; with NCCL hidden from the
# consumer it is still there, without them; with the CUDA toolkit hidden the
# package is found and only find_package(cifarnet COMPONENTS cuda) fails.
# Usage: run_cuda_config.sh <cifarnet-source> <work-dir> <build-had-nccl: TRUE|FALSE>
set -euo pipefail
src=$1 work=$2 had_nccl=$3
rm -rf "$work" && mkdir -p "$work"
cmake -S "$src" -B "$work/cifarnet-build" -G Ninja -DCIFARNET_BUILD_TESTS=OFF -DCIFARNET_BUILD_EXAMPLES=OFF \
  -DCIFARNET_BUILD_BENCH=OFF -DCIFARNET_COMPILED=OFF -DCMAKE_INSTALL_PREFIX="$work/prefix" > "$work/configure.log"
cmake --install "$work/cifarnet-build" > "$work/install.log"
consumer() {  # <name> <cmake args...>: configure output in $work/<name>.log, status returned
  local name=$1
  shift
  cmake -S "$src/tests/install/consumer_cuda" -B "$work/$name" -DCMAKE_PREFIX_PATH="$work/prefix" "$@" \
    > "$work/$name.log" 2>&1
}
fail() {
  echo "FAIL: $*"
  exit 1
}
consumer with_nccl || fail "consumer with NCCL: $(tail -5 "$work/with_nccl.log")"
if [ "$had_nccl" = TRUE ]; then
  grep -q "links: .*NCCL::nccl" "$work/with_nccl.log" || fail "NCCL found but not linked"
  grep -q "defines: .*CIFARNET_WITH_NCCL=1" "$work/with_nccl.log" || fail "NCCL found but not defined"
fi
consumer no_nccl -DCMAKE_DISABLE_FIND_PACKAGE_NCCL=ON || fail "cifarnet::cuda without NCCL: $(tail -5 "$work/no_nccl.log")"
grep -q "links: .*CUDNN::cudnn" "$work/no_nccl.log" || fail "cifarnet::cuda lost cuDNN"
if grep -q "NCCL" "$work/no_nccl.log"; then fail "NCCL absent but cifarnet::cuda still names it"; fi
consumer no_cuda_plain -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DWANT_CUDA=OFF ||
  fail "without CUDA the package itself must still be found"
grep -q "cuda component: FALSE" "$work/no_cuda_plain.log" || fail "cuda component reported found without CUDA"
if consumer no_cuda -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON; then
  fail "COMPONENTS cuda found without the CUDA toolkit"
fi
echo "installed config: cifarnet::cuda with NCCL ($had_nccl), without NCCL, and absent without CUDA: ok"
