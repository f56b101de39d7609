// examples/resnet_cifar10/cuda.cpp — the run on the CUDA backend (--num-gpus 1),
// compiled apart from main.cpp so the two instantiations build in parallel.
// Under mpirun each process takes the GPU of its local rank.
#include <cstdlib>
#include <string>

#include <cifarnet/backend/cuda.hpp>

#include "train.hpp"

namespace resnet_cifar10 {

int run_cuda(const Flags& f, Cluster& cl) {
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) {
    const int n = backend::cuda::device_count();
    const std::string ordinal = std::to_string(n > 0 ? std::atoi(local) % n : 0);
    setenv("CIFARNET_CUDA_DEVICE", ordinal.c_str(), 0);  // Device<Cuda> reads it
  }
  return run<backend::Cuda>(f, cl);
}

}  // namespace resnet_cifar10
