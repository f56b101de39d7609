#!/usr/bin/env bash
# The CUDA backend's checks on a machine with a GPU: test_backend_cuda, i.e.
# every op of tests/backend/test_agreement.cpp on the GPU against the
# reference backend in double (Conv2d, BatchNorm, Pool2d, Lrn, Relu, Dense,
# Gemm, Eltwise, ChannelPad, GlobalAvgPool, SoftmaxCrossEntropy, BnStats,
# SyncBatchNorm), the backend's NVRTC kernels against the CPU code, the GPU
# optimizers against the CPU ones, ResNet-8 and the tutorial CNN against the
# oneDNN backend, NCCL and towers, and the style-transfer Gram matrices.
# Without a GPU every case prints "SKIPPED: ..." (ctest: Not Run); here a
# case skipped for want of any GPU is a failure, since a GPU is what this
# script is for (the two-GPU towers case is skipped on a one-GPU machine).
#
# Usage: bash scripts/gpu_check.sh [dir holding test_backend_cuda]
#   default: build/tests/backend (after the README's build). A machine
#   without the project's Debian packages can run a binary built elsewhere
#   with the libraries it needs on LD_LIBRARY_PATH (libdnnl, libopenblas,
#   libgomp; CUDA, cuDNN and NCCL from that machine).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-build/tests/backend}
BIN="$DIR/test_backend_cuda"
[ -x "$BIN" ] || { echo "gpu_check: no $BIN (build it first: cmake --build build --target test_backend_cuda)"; exit 2; }
echo "=== GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv || { echo "gpu_check: nvidia-smi failed"; exit 2; }
echo "=== test_backend_cuda (durations per case)"
set +e
OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} "$BIN" --durations yes 2>&1 | tee /tmp/gpu_check_$$.log
rc=${PIPESTATUS[0]}
set -e
if grep -q "SKIPPED: the CUDA backend needs a GPU" /tmp/gpu_check_$$.log; then
  echo "gpu_check: cases were skipped for want of a GPU"
  rc=1
fi
grep -o "SKIPPED: .*" /tmp/gpu_check_$$.log | sort | uniq -c | sed 's/^/gpu_check: skipped: /' || true
rm -f /tmp/gpu_check_$$.log
echo "gpu_check: exit $rc"
exit $rc
