// ResNet<Block, Depths...>: per-stage depths fixed at compile time (RepeatN).
#include <catch2/catch.hpp>

#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>

using namespace cifarnet;

TEST_CASE("ResNet-18 for CIFAR has 11,173,962 trainable parameters and the stage layout", "[nn][resnet]") {
  // By hand: stem 3·3·3·64 + BN 2·64 = 1,856; stage1 2·(2·3·3·64·64 + 2·128)
  // = 147,968; stage2 (3·3·64·128 + 3·3·128·128 + 512 + 64·128 + 256) +
  // (2·3·3·128·128 + 512) = 525,568; stage3 2,099,712; stage4 8,393,728;
  // head 512·10 + 10 = 5,130. Sum: 11,173,962 (the count PyTorch reports
  // for the common CIFAR ResNet-18).
  Model<ResNet18Cifar, backend::Reference> net({3, 32, 32}, DataFormat::NHWC, NetOptions());
  auto& P = net.parameters();
  CHECK(P.num_trainable() == 11173962);
  CHECK(P.info(P.id("stem/conv1/weights")).shape == std::vector<std::size_t>{3, 3, 3, 64});
  CHECK(P.info(P.id("stage4/block1/conv2/weights")).shape == std::vector<std::size_t>{3, 3, 512, 512});
  // The projection shortcut of a stage's first block: a strided 1x1 conv + BN.
  CHECK(P.info(P.id("stage2/block0/conv3/weights")).shape == std::vector<std::size_t>{1, 1, 64, 128});
  CHECK_FALSE(P.find("stage1/block0/conv3/weights").has_value());  // identity shortcut there
  CHECK_FALSE(P.find("stage1/block2/conv1/weights").has_value());  // two blocks per stage
  CHECK(P.info(P.id("head/dense1/weights")).shape == std::vector<std::size_t>{512, 10});
  // NetOptions::repeat does not change a fixed depth.
  Model<ResNet18Cifar, backend::Reference> again({3, 32, 32}, DataFormat::NHWC, NetOptions().with_repeat(5));
  CHECK(again.parameters().num_trainable() == 11173962);
}

TEST_CASE("ResNet-34's 3/4/6/3 stages and a one-stage ResNet are one line each and run", "[nn][resnet]") {
  Model<ResNet<resnet::BasicBlock, 3, 4, 6, 3>, backend::Reference> r34({3, 32, 32}, DataFormat::NHWC,
                                                                        NetOptions());
  auto& P = r34.parameters();
  CHECK(P.find("stage3/block5/conv2/weights").has_value());
  CHECK_FALSE(P.find("stage3/block6/conv2/weights").has_value());
  CHECK(P.find("stage4/block2/conv2/weights").has_value());
  // 21,282,122: the CIFAR ResNet-34 count (ResNet-18 plus the extra blocks:
  // one of 73,984 in stage1, two of 295,424 in stage2, four of 1,180,672 in
  // stage3, one of 4,720,640 in stage4).
  CHECK(P.num_trainable() == 21282122);
  CHECK(P.num_trainable() == 11173962 + 73984 + 2 * 295424 + 4 * 1180672 + 4720640);

  using Tiny = ResNet<resnet::BasicBlock, 1>;
  Model<Tiny, backend::Reference> tiny({3, 8, 8}, DataFormat::NCHW, NetOptions(), 3);
  auto x = make_tensor<float>({2, 3, 8, 8}, DataFormat::NCHW);
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = float(i % 255);
  const auto& y = tiny.forward(x, Mode::Infer);
  CHECK(y.size() == 2 * 10);
}
