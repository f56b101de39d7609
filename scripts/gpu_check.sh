#!/usr/bin/env bash
# The CUDA backend's checks on a machine with a GPU: test_backend_cuda, i.e.
# every op of tests/backend/test_agreement.cpp on the GPU against the
# reference backend in double (Conv2d, BatchNorm, Pool2d, Lrn, Relu, Dense,
# Gemm, Eltwise, ChannelPad, GlobalAvgPool, SoftmaxCrossEntropy, BnStats,
# SyncBatchNorm), the backend's NVRTC kernels against the CPU code, the GPU
# optimizers against the CPU ones, ResNet-8 and the tutorial CNN against the
# oneDNN backend, ResNet-20/56 at batch 128 step by step against oneDNN,
# 200 passes cycling batch sizes with the free GPU memory stable, NCCL and
# towers, the style-transfer Gram matrices, and the PCIe bytes of one
# ResNet-20 step (staged, and with a device-resident parameter arena: both
# printed at the end); then ResNet-8 once more under compute-sanitizer's
# memcheck; then ResNet-20/56 training and inference images/s, cifarnet
# beside PyTorch on the same GPU where torch is installed, and one table of
# the training ratios per precision (scripts/gpu_table.sh).
# Without a GPU every case prints "SKIPPED: ..." (ctest: Not Run); here a
# case skipped for want of any GPU is a failure, since a GPU is what this
# script is for (the two-GPU towers case is skipped on a one-GPU machine).
#
# Usage: bash scripts/gpu_check.sh [dir holding test_backend_cuda and gpu_bench]
#   default: configure build/ if needed and build both targets there. Without
#   an NVIDIA GPU it says so and exits 0 (nothing checked). A machine
#   without the project's Debian packages can run a binary built elsewhere
#   with the libraries it needs on LD_LIBRARY_PATH (libdnnl, libopenblas,
#   libgomp; CUDA, cuDNN and NCCL from that machine).
set -euo pipefail
cd "$(dirname "$0")/.."
# No GPU: say so and stop with success (nothing to check, nothing pretended).
NVSMI=${NVIDIA_SMI:-nvidia-smi}  # (a test points it at `false` to play a machine without a GPU)
if ! command -v "$NVSMI" > /dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU on this machine (nvidia-smi not found): nothing checked"
  exit 0
fi
if ! gpus=$("$NVSMI" --query-gpu=name --format=csv,noheader 2>&1) || [ -z "$gpus" ]; then
  echo "gpu_check: no usable NVIDIA GPU on this machine (nvidia-smi: ${gpus:-no GPU listed}): nothing checked"
  exit 0
fi
if [ $# -ge 1 ]; then
  DIR=$1  # binaries built elsewhere
else
  # Build here: the CUDA test binary (every case of ctest's backend CUDA
  # test, run below with per-case durations) and the GPU benchmark.
  [ -f build/CMakeCache.txt ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build build --target test_backend_cuda gpu_bench
  DIR=build/tests/backend
  GPU_BENCH=${GPU_BENCH:-build/bench/gpu_bench}
fi
BIN="$DIR/test_backend_cuda"
[ -x "$BIN" ] || { echo "gpu_check: no $BIN (build it first: cmake --build build --target test_backend_cuda)"; exit 2; }
echo "=== GPU"
"$NVSMI" --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
echo "=== test_backend_cuda (durations per case)"
set +e
OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} "$BIN" --durations yes 2>&1 | tee /tmp/gpu_check_$$.log
rc=${PIPESTATUS[0]}
set -e
# Two ResNet-8 training passes per data format under compute-sanitizer's
# memcheck (out-of-bounds and misaligned device accesses, leaks at exit).
if [ "$rc" = 0 ]; then
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1 || true)
  if [ -n "$SAN" ]; then
    echo "=== compute-sanitizer memcheck: ResNet-8 on the GPU against oneDNN"
    set +e
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} "$SAN" --tool memcheck --leak-check full --error-exitcode 3 \
      "$BIN" "ResNet-8 on the CUDA backend matches the oneDNN backend: logits and gradients" 2>&1 | tail -15
    src=${PIPESTATUS[0]}
    set -e
    echo "gpu_check: compute-sanitizer exit $src"
    [ "$src" = 0 ] || rc=1
  else
    echo "gpu_check: compute-sanitizer not found: memcheck not run"
    rc=1
  fi
fi
# Speed beside the peer on the same GPU, one run: bench/cuda/gpu_bench
# (cifarnet, backend::Cuda as it is: fp32, then TF32 convolutions for the
# training benchmarks, then both with CUDA graphs on) and bench/peer_torch_gpu.py (PyTorch at fp32, TF32 and
# bf16 autocast; eager, torch.compile, max-autotune, reduce-overhead) when a
# torch with CUDA is installed; both upload each step's batch from pinned
# host memory. Both say so when they cannot measure. Then one table
# (scripts/gpu_table.sh): per network and precision, the ratio to the
# peer's best mode. Figures only, no pass/fail.
SPEED_LOG=/tmp/gpu_speed_$$.log
: > "$SPEED_LOG"
GPU_BENCH=${GPU_BENCH:-$DIR/gpu_bench}
[ -x "$GPU_BENCH" ] || GPU_BENCH=build/bench/gpu_bench
if [ -x "$GPU_BENCH" ]; then
  echo "=== images/s on this GPU: cifarnet (bench/cuda/gpu_bench)" | tee -a "$SPEED_LOG"
  for extra in "" "--tf32 --only resnet20,resnet56" "--graphs --only resnet20,resnet56" \
    "--graphs --tf32 --only resnet20,resnet56"; do
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} "$GPU_BENCH" --reps 5 --steps 10 --warmup 10 $extra \
      > "$SPEED_LOG.one" 2>&1 || rc=1
    tee -a "$SPEED_LOG" < "$SPEED_LOG.one"
  done
  rm -f "$SPEED_LOG.one"
else
  echo "gpu_check: no gpu_bench (cmake --build build --target gpu_bench): cifarnet's GPU speed not measured"
fi
echo "=== images/s on this GPU: PyTorch (bench/peer_torch_gpu.py)" | tee -a "$SPEED_LOG"
# PEER_ARGS narrows it (say "--only resnet20,resnet56 --modes eager,compile": each compiled mode takes a
# while per model).
# shellcheck disable=SC2086
${PEER_PY:-python3} bench/peer_torch_gpu.py --reps 5 --steps 10 --warmup 10 ${PEER_ARGS:-} 2>&1 |
  grep -v '^W[0-9]' | tee -a "$SPEED_LOG" || true
echo "=== one table: cifarnet against PyTorch's best mode, training at batch 128 (scripts/gpu_table.sh)"
bash scripts/gpu_table.sh "$SPEED_LOG" || true
rm -f "$SPEED_LOG"
if grep -q "SKIPPED: the CUDA backend needs a GPU" /tmp/gpu_check_$$.log; then
  echo "gpu_check: cases were skipped for want of a GPU"
  rc=1
fi
echo "=== PCIe traffic per ResNet-20 step (Device::transfers(); docs/SCALING.md)"
grep -A4 "PCIe per ResNet-20 step" /tmp/gpu_check_$$.log || echo "gpu_check: no PCIe figures printed"
grep -o "SKIPPED: .*" /tmp/gpu_check_$$.log | sort | uniq -c | sed 's/^/gpu_check: skipped: /' || true
rm -f /tmp/gpu_check_$$.log
echo "gpu_check: exit $rc"
exit $rc
