// examples/cifar10_cnn/multi_gpu_cuda.hpp — cifar10_multi_gpu_train's GPU
// towers (multi_gpu_cuda.cpp, compiled only with the CUDA backend).
#pragma once

#include <cstddef>

#include "train_loop.hpp"

namespace cifar10 {

/// Whether this machine has at least `n` GPUs for the towers.
bool gpus_for_towers(int n);

/// Trains with tower i on GPU i (i < n) on batches of `batch` images.
int train_on_gpus(const TrainFlags& f, int n, std::size_t batch);

}  // namespace cifar10
