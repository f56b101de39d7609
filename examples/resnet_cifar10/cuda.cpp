// examples/resnet_cifar10/cuda.cpp — the run on the CUDA backend (--num-gpus 1),
// compiled apart from main.cpp so the two instantiations build in parallel.
// Under mpirun each process takes the GPU of its local rank: Device<Cuda>'s
// default choice (CIFARNET_CUDA_DEVICE when the user set it, else the local
// rank modulo the GPUs present; backend/cuda/host_config.hpp).
#include <cifarnet/backend/cuda.hpp>

#include "train.hpp"

namespace resnet_cifar10 {

int run_cuda(const Flags& f, recipes::Strategy& st, const train::GpuPlacement& gpus) {
  return run<backend::Cuda>(f, st, gpus);
}

}  // namespace resnet_cifar10
