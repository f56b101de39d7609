// recipes::Session::activation: the tutorial CNN's taps (models/
// cifar10_cnn.hpp, cifar10_cnn_taps()) show each layer's output of the last
// training step, what cifar10_train's activation summaries read; towers show
// none.
#include <catch2/catch.hpp>

#include <cifarnet/distributed/towers.hpp>
#include <cifarnet/optim/sgd.hpp>
#include <cifarnet/recipes/session.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "instances/cifar10_cnn.hpp"

using namespace cifarnet;
using Catch::Matchers::Contains;

TEST_CASE("A session shows the tutorial CNN's activations through its taps", "[train][session][taps]") {
  using Net = Model<Cifar10Cnn, backend::OneDnn>;
  const InputShape in{3, 24, 24};
  auto s = recipes::make_session(std::make_unique<Net>(in, DataFormat::NHWC, cifar10_cnn_options(), 1),
                                 train::TrainerOptions().max_steps(1));
  CHECK_THROWS_WITH(s->activation("conv1"), Contains("no activation yet"));
  optim::GradientDescent<float> opt(s->trainer().parameters());
  s->trainer().set_optimizer(opt, [](std::int64_t) { return 0.1; });
  train::Batch b;
  b.images = make_tensor<float>({4, 3, 24, 24}, DataFormat::NHWC);
  Rng rng(3);
  for (auto& v : b.images) v = float(rng.normal());
  b.labels = {0, 1, 2, 3};
  s->trainer().step(b);

  const std::vector<std::string> taps = cifar10_cnn_taps();
  REQUIRE(taps == std::vector<std::string>{"conv1", "conv2", "local3", "local4", "softmax_linear"});
  const std::vector<Shape> shapes = {
      {4, 64, 24, 24}, {4, 64, 12, 12}, {4, 384, 1, 1}, {4, 192, 1, 1}, {4, 10, 1, 1}};
  for (std::size_t i = 0; i < taps.size(); ++i) {
    INFO(taps[i]);
    const Tensor<float>* a = s->activation(taps[i]);
    REQUIRE(a);
    CHECK(shape_of(*a, DataFormat::NHWC) == shapes[i]);
    const auto [lo, hi] = std::minmax_element(a->begin(), a->end());
    if (i < 4) CHECK(*lo >= 0.0f);  // after a ReLU
    CHECK(*hi > *lo);
  }
  // The logits tap holds the step's logits: the network's output, negative
  // values included.
  const Tensor<float>* logits = s->activation("softmax_linear");
  CHECK(*std::min_element(logits->begin(), logits->end()) < 0.0f);
  CHECK_THROWS_WITH(s->activation("conv3"), Contains("no tap named 'conv3'"));

  auto towers = recipes::make_session(
      std::make_unique<distributed::Towers<Net>>(2, in, DataFormat::NHWC, cifar10_cnn_options(), 1),
      train::TrainerOptions());
  CHECK(towers->activation("conv1") == nullptr);
}
