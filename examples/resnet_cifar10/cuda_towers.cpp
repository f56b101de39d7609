// examples/resnet_cifar10/cuda_towers.cpp — --num-gpus N > 1: the seed's
// towers in one process, tower i on GPU i (distributed::Towers), the
// gradients summed over the GPUs with NCCL when the build found it.
#include <memory>

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/distributed/towers.hpp>
#ifdef CIFARNET_WITH_NCCL
#include <cifarnet/distributed/nccl.hpp>
#endif

#include "train.hpp"

namespace resnet_cifar10 {

std::unique_ptr<distributed::TowerReducer<float>> make_tower_reducer([[maybe_unused]] int gpus) {
#ifdef CIFARNET_WITH_NCCL
  return std::make_unique<distributed::NcclTowerReducer>(gpus);
#else
  return std::make_unique<distributed::HostTowerReducer<float>>();
#endif
}

int run_cuda_towers(const Flags& f, recipes::Strategy& st, const train::GpuPlacement& gpus) {
  return run<backend::Cuda, true>(f, st, gpus);
}

}  // namespace resnet_cifar10
