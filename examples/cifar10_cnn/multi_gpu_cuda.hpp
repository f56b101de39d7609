// examples/cifar10_cnn/multi_gpu_cuda.hpp — cifar10_multi_gpu_train's GPU
// towers (multi_gpu_cuda.cpp, compiled only with the CUDA backend).
#pragma once

#include <cstdint>
#include <memory>

#include "network.hpp"

namespace cifar10 {

/// Whether `n` GPUs are present for the towers.
bool gpus_for_towers(int n);

/// The tutorial CNN in `n` towers, tower i on GPU i, the gradients summed on
/// the host, with a trainer of options `o`.
std::unique_ptr<recipes::Session> make_gpu_session(int n, std::uint64_t seed, const train::TrainerOptions& o);

}  // namespace cifar10
