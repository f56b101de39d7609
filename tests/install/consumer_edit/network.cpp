// The user's network: the only file an edit of the network touches. A small
// conv net on oneDNN behind a recipes::Session (main.cpp drives it).
#include <cstdint>
#include <memory>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/recipes/session.hpp>

using namespace cifarnet;

std::unique_ptr<recipes::Session> make_session(std::int64_t steps) {
  using Net = Sequential<Conv2d<3, 16, 3>, BatchNorm2d<16>, ReLU, MaxPool2d<2, 2>,  //
                         Conv2d<16, 32, 3>, BatchNorm2d<32>, ReLU, GlobalAvgPool, Dense<32, 10>>;
  return recipes::make_session(
      std::make_unique<Model<Net, backend::OneDnn>>(InputShape{3, 32, 32}, DataFormat::NHWC, NetOptions(), 7),
      train::TrainerOptions().max_steps(steps));
}
