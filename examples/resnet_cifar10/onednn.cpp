// examples/resnet_cifar10/onednn.cpp — the network on the oneDNN backend
// (--num-gpus 0, or no GPU present): its forward and backward compile here,
// apart from the recipe (run.cpp) and the flags (main.cpp), so the three
// build in parallel.
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/nn/pick_data_format.hpp>

#include "../common/explain_plan.hpp"
#include "network.hpp"

namespace resnet_cifar10 {

NetOptions network_options(const NetworkSpec& n) {
  NetOptions opts = resnet_options(n.num_layers, n.bn_decay, n.bn_epsilon);
  if (n.bf16) opts.with_conv_precision(ConvPrecision::BF16);
  if (n.winograd) opts.with_conv_algorithm(ConvAlgorithm::Winograd);
  return opts;
}

std::unique_ptr<recipes::Session> make_onednn_session(const NetworkSpec& n, const train::TrainerOptions& o) {
  using Net = Model<ResNetCifar<>, backend::OneDnn>;
  return recipes::make_session(std::make_unique<Net>(kInput, n.format, network_options(n), n.seed), o);
}

FormatPick pick_onednn_format(const NetworkSpec& n) {
  return pick_data_format<ResNetCifar<>, backend::OneDnn>(kInput, network_options(n));
}

std::string explain_onednn_plan(const NetworkSpec& n, std::size_t train_batch, std::size_t eval_batch) {
  Model<ResNetCifar<>, backend::OneDnn> net(kInput, n.format, network_options(n), n.seed);
  return examples::explain_step_plans(net, train_batch, eval_batch);
}

}  // namespace resnet_cifar10
