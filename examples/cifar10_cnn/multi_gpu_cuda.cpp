// examples/cifar10_cnn/multi_gpu_cuda.cpp — cifar10_multi_gpu_train's towers
// on GPUs: tower i on GPU i (distributed::Towers over backend::Cuda), the
// gradients summed on the host. Its own translation unit, so the CPU program
// does not compile the CUDA models.
#include "multi_gpu_cuda.hpp"

#include <iostream>
#include <memory>
#include <string>

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/distributed/towers.hpp>

namespace cifar10 {

bool gpus_for_towers(int n) { return backend::cuda::device_count() >= n; }

int train_on_gpus(const TrainFlags& f, int n, std::size_t batch) {
  using Gpu = Model<Cifar10Cnn, backend::Cuda>;
  using Dev = Device<backend::Cuda>;
  if (f.log_device_placement)
    std::cout << "device: " << n << " GPU(s); tower i on GPU i, the variables and the update on GPU 0's "
              << "tower (host arena)\n";
  distributed::Towers<Gpu> net(std::size_t(n), kInput, kFormat, cifar10_cnn_options(), f.seed,
                               [](std::size_t i) { return std::make_unique<Dev>(int(i)); });
  return train(f, net, batch,
               "Tutorial CNN in " + std::to_string(n) + " tower(s) of batch " + std::to_string(f.batch_size) +
                   " on " + std::to_string(n) + " GPU(s)");
}

}  // namespace cifar10
