#include <catch2/catch.hpp>

#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>

using namespace cifarnet;

TEST_CASE("ResNet parameter counts are what the architecture implies", "[nn][resnet]") {
  const std::pair<int, double> expected[] = {{20, 0.27}, {32, 0.46}, {44, 0.66}, {56, 0.85}, {110, 1.7}};
  for (auto [depth, millions] : expected) {
    Model<ResNetCifar<>, backend::Reference> net({3, 32, 32}, DataFormat::NCHW, resnet_options(depth));
    const double m = double(net.parameters().num_trainable()) / 1e6;
    INFO("ResNet-" << depth << " has " << net.parameters().num_trainable() << " trainable parameters");
    CHECK(m == Approx(millions).epsilon(0.03));
  }
}
