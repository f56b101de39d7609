// examples/train_demo/network.cpp — the demo's network, a ResNet-8 on
// oneDNN for 32x32 images: its forward and backward compile here at -O3,
// apart from the demo's flags, data, loop and checkpoints (main.cpp, -Og),
// which drive it through a recipes::Session.
#include <cstdint>
#include <memory>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/nn/model.hpp>
#include <cifarnet/recipes/session.hpp>

namespace train_demo {

using namespace cifarnet;

std::unique_ptr<recipes::Session> make_session(std::int64_t steps) {
  using Net = Model<ResNetCifar<10>, backend::OneDnn>;
  return recipes::make_session(
      std::make_unique<Net>(InputShape{3, 32, 32}, DataFormat::NHWC, resnet_options(8),
                            /*seed=*/7),
      train::TrainerOptions().max_steps(steps));
}

}  // namespace train_demo
