// examples/resnet_cifar10/cuda.cpp — the network on the CUDA backend:
// --num-gpus 1 one model, --num-gpus N > 1 the seed's towers in one process,
// tower i on GPU i (distributed::Towers), the gradients summed on the host
// (--variable-strategy CPU, the seed's default) or over the GPUs with NCCL
// (--variable-strategy GPU). Both share the model's code here, apart from
// the recipe (run.cpp). Under mpirun each process takes the GPU of its local
// rank: Device<Cuda>'s default choice (CIFARNET_CUDA_DEVICE when the user
// set it, else the local rank modulo the GPUs present;
// backend/cuda/host_config.hpp).
#include <memory>

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/distributed/towers.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/nn/pick_data_format.hpp>
#ifdef CIFARNET_WITH_NCCL
#include <cifarnet/distributed/nccl.hpp>
#endif

#include "../common/explain_plan.hpp"
#include "network.hpp"

namespace resnet_cifar10 {

namespace {

using One = Model<ResNetCifar<>, backend::Cuda>;

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

}  // namespace

std::unique_ptr<recipes::Session> make_cuda_session(const NetworkSpec& n, const train::TrainerOptions& o) {
  auto net = std::make_unique<One>(kInput, n.format, network_options(n), n.seed);
  recipes::set_cuda_conv_options(*net, n.deterministic, n.allow_tf32);  // before the first convolution
  return recipes::make_session(std::move(net), o);
}

std::unique_ptr<recipes::Session> make_cuda_towers_session(const NetworkSpec& n,
                                                           const train::TrainerOptions& o) {
  using Dev = Device<backend::Cuda>;
  auto net = std::make_unique<distributed::Towers<One>>(
      std::size_t(n.num_gpus), kInput, n.format, network_options(n), n.seed,
      [](std::size_t i) { return std::make_unique<Dev>(int(i)); },
      make_tower_reducer(n.num_gpus, distributed::parse_variable_strategy(n.variable_strategy)));
  recipes::set_cuda_conv_options(*net, n.deterministic, n.allow_tf32);
  return recipes::make_session(std::move(net), o);
}

// One model on the process's GPU, as make_cuda_session makes it (each
// tower is one such model, on its own GPU).
std::string explain_cuda_plan(const NetworkSpec& n, std::size_t train_batch, std::size_t eval_batch) {
  One net(kInput, n.format, network_options(n), n.seed);
  recipes::set_cuda_conv_options(net, n.deterministic, n.allow_tf32);
  return examples::explain_step_plans(net, train_batch, eval_batch);
}

FormatPick pick_cuda_format(const NetworkSpec& n) {
  return pick_data_format<ResNetCifar<>, backend::Cuda>(kInput, network_options(n));
}

}  // namespace resnet_cifar10
