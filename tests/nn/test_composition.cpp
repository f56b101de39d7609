#include <catch2/catch.hpp>

#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>
#include "instances/resnet.hpp"

using namespace cifarnet;

// Trainable parameters of ResNet-(6n+2) with 11 logits (the seed's), counted
// by hand from models/resnet.hpp (convolutions have no bias; a batch norm
// trains gamma and beta, 2 per channel; the moving statistics are not
// trainable):
//   stem     3x3x3x16 conv + BN(16)                         =    432 +  32 =    464
//   stage 1  n blocks of 2 x (3x3x16x16 conv + BN(16))      = n x (2 x 2304 + 2 x 32)   = 4672 n
//   stage 2  first: 3x3x16x32 + BN(32) + 3x3x32x32 + BN(32) = 4608 + 64 + 9216 + 64     = 13952
//            n - 1 blocks of 2 x (3x3x32x32 + BN(32))       = (n - 1) x 18560
//   stage 3  first: 3x3x32x64 + BN(64) + 3x3x64x64 + BN(64) = 18432 + 128 + 36864 + 128 = 55552
//            n - 1 blocks of 2 x (3x3x64x64 + BN(64))       = (n - 1) x 73984
//   head     dense 64 x 11 + 11 biases                      =    715
// (the shortcuts, average pooling and zero padding, have none). In all:
//   464 + 13952 + 55552 + 715 - 18560 - 73984 + n (4672 + 18560 + 73984) = 97216 n - 21861:
//   n = 3 (ResNet-20) 269,787; n = 5 (32) 464,219; n = 7 (44) 658,651;
//   n = 9 (56) 853,083; n = 18 (110) 1,728,027. (ResNet paper: 0.27M, 0.46M,
//   0.66M, 0.85M, 1.7M with 10 classes, i.e. 65 fewer each.)
TEST_CASE("ResNet parameter counts are exactly what the architecture implies", "[nn][resnet]") {
  const std::pair<int, std::size_t> expected[] = {
      {20, 269787}, {32, 464219}, {44, 658651}, {56, 853083}, {110, 1728027}};
  for (auto [depth, count] : expected) {
    Model<ResNetCifar<>, backend::Reference> net({3, 32, 32}, DataFormat::NCHW, resnet_options(depth));
    INFO("ResNet-" << depth << " has " << net.parameters().num_trainable() << " trainable parameters");
    CHECK(net.parameters().num_trainable() == count);
    CHECK(count == std::size_t(97216 * (depth - 2) / 6 - 21861));
  }
  // With 10 logits (the ResNet paper's), 65 fewer: 64 weights and a bias.
  Model<ResNetCifar<10>, backend::Reference> ten({3, 32, 32}, DataFormat::NCHW, resnet_options(20));
  CHECK(ten.parameters().num_trainable() == 269787 - 65);
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

#include <cifarnet/nn/pick_data_format.hpp>

TEST_CASE("pick_data_format measures both layouts and takes the faster median", "[nn][format]") {
  using Small = Sequential<Conv2d<3, 4, 3>, GlobalAvgPool, Dense<4, 2>>;
  const FormatPick p = pick_data_format<Small, backend::Reference>({3, 8, 8}, NetOptions(), 4, 3);
  CHECK(p.batch == 4);
  CHECK(p.repetitions == 3);
  REQUIRE(p.timings.size() == 2);
  CHECK(p.timings[0].format == DataFormat::NHWC);
  CHECK(p.timings[1].format == DataFormat::NCHW);
  CHECK(p.timings[0].seconds > 0);
  CHECK(p.timings[1].seconds > 0);
  const FormatTiming& fastest = p.timings[0].seconds <= p.timings[1].seconds ? p.timings[0] : p.timings[1];
  CHECK(p.format == fastest.format);
  CHECK_THAT(p.describe(),
             Catch::StartsWith("measured a training step of batch 4, median of 3: channels_last "));
  CHECK_THROWS_WITH((pick_data_format<Small, backend::Reference>({3, 8, 8}, NetOptions(), 4, 0)),
                    Catch::Contains("repetitions must be positive"));
}
