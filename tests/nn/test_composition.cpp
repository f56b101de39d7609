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

#include <cifarnet/models/cifar10_cnn.hpp>
#include <cifarnet/optim/optim.hpp>

TEST_CASE("The tutorial CNN has the tutorial's shapes, names and weight-decay set", "[nn][cnn]") {
  Model<Cifar10Cnn, backend::Reference> net({3, 24, 24}, DataFormat::NHWC, cifar10_cnn_options());
  auto& P = net.parameters();
  CHECK(P.info(P.id("conv1/weights")).shape == std::vector<std::size_t>{5, 5, 3, 64});
  CHECK(P.info(P.id("local3/weights")).shape == std::vector<std::size_t>{6 * 6 * 64, 384});
  CHECK(P.info(P.id("softmax_linear/weights")).shape == std::vector<std::size_t>{192, 10});
  // The tutorial's chain trains every variable and decays local3/local4 weights only.
  optim::Chain<optim::WeightDecay, optim::GradientDescent> opt(
      P, optim::WeightDecayOptions(0.004).decay(optim::Selection(cifar10_cnn_decayed())), {});
  const auto& wd = opt.get<optim::WeightDecay>();
  CHECK(wd.decayed() == std::vector<std::string>{"local3/weights", "local4/weights"});
  CHECK_FALSE(wd.decays("conv1/weights"));
  CHECK_FALSE(wd.decays("local3/biases"));
  P.zero_grad();
  const float l3 = P.value(P.id("local3/weights"))[0];
  double l2 = 0;
  for (const char* name : {"local3/weights", "local4/weights"}) {
    const std::size_t id = P.id(name);
    double s = 0;
    for (std::size_t i = 0; i < P.info(id).size; ++i) s += double(P.value(id)[i]) * double(P.value(id)[i]);
    l2 += s / 2;
  }
  CHECK(opt.regularize(P) == Approx(0.004 * l2).epsilon(1e-6));  // exact rounding: tests/optim
  CHECK(P.grad(P.id("local3/weights"))[0] == float(0.004) * l3);
  CHECK(P.grad(P.id("local3/biases"))[0] == 0.0f);
  CHECK(P.value(P.id("conv2/biases"))[5] == Approx(0.1f));
  CHECK(net.output_shape(2) == Shape{2, 10, 1, 1});
  // 1,068,298 parameters in the TF tutorial model.
  CHECK(P.num_trainable() == 1068298);
}
