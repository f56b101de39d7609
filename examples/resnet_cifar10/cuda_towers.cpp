// examples/resnet_cifar10/cuda_towers.cpp — --num-gpus N > 1: the seed's
// towers in one process, tower i on GPU i (distributed::Towers), the
// gradients summed on the host (--variable-strategy CPU, the seed's default)
// or over the GPUs with NCCL (--variable-strategy GPU).
#include <memory>

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/distributed/towers.hpp>
#ifdef CIFARNET_WITH_NCCL
#include <cifarnet/distributed/nccl.hpp>
#endif

#include "train.hpp"

namespace resnet_cifar10 {

std::unique_ptr<distributed::TowerReducer<float>> make_tower_reducer([[maybe_unused]] int gpus,
                                                                     distributed::VariableStrategy v) {
  if (v == distributed::VariableStrategy::CPU)
    return std::make_unique<distributed::HostTowerReducer<float>>();
#ifdef CIFARNET_WITH_NCCL
  return std::make_unique<distributed::NcclTowerReducer>(gpus);
#else
  throw ConfigError(
      "--variable-strategy GPU with --num-gpus > 1 sums the towers' gradients with NCCL, which "
      "this build has not found; use --variable-strategy CPU");
#endif
}

int run_cuda_towers(const Flags& f, recipes::Strategy& st, const train::GpuPlacement& gpus) {
  return run<backend::Cuda, true>(f, st, gpus);
}

}  // namespace resnet_cifar10
