// examples/cifar10_cnn/multi_gpu_cuda.cpp — cifar10_multi_gpu_train's towers
// on GPUs: tower i on GPU i (distributed::Towers over backend::Cuda), the
// gradients summed on the host. Its own translation unit, so the CPU program
// does not compile the CUDA models.
#include "multi_gpu_cuda.hpp"

#include <memory>

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/distributed/towers.hpp>
#include <cifarnet/models/cifar10_cnn.hpp>

namespace cifar10 {

bool gpus_for_towers(int n) { return backend::cuda::device_count() >= n; }

std::unique_ptr<recipes::Session> make_gpu_session(int n, std::uint64_t seed,
                                                   const train::TrainerOptions& o) {
  using Gpu = Model<Cifar10Cnn, backend::Cuda>;
  using Dev = Device<backend::Cuda>;
  return recipes::make_session(
      std::make_unique<distributed::Towers<Gpu>>(std::size_t(n), kInput, kFormat, cifar10_cnn_options(), seed,
                                                 [](std::size_t i) { return std::make_unique<Dev>(int(i)); }),
      o);
}

}  // namespace cifar10
