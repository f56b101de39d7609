// The reference backend's fused forms: the whole fused ResNet against the
// unfused one, layer for layer, in double (test_fusion.cpp's comparison;
// oneDNN in test_fusion_resnet_onednn.cpp), and the fused BN+ReLU, BN+GELU
// and residual+ReLU against finite differences. Files of their own, so that no
// test translation unit takes long to compile; no oneDNN header here.
#include "nn/fusion_compare.hpp"
#include "nn/gradcheck.hpp"

using namespace cifarnet;

TEST_CASE(
    "The fused ResNet equals the unfused ResNet on the reference backend: names, outputs, gradients and "
    "BN statistics",
    "[nn][fusion][resnet]") {
  test::compare_formats<ResNetCifar<5>, test::UnfusedResNet<5>, backend::Reference, double>(
      {3, 8, 8}, 4, 1e-12, resnet_options(14));
}

TEST_CASE("The reference backend's fused BN+ReLU, BN+GELU and residual+ReLU match finite differences",
          "[nn][fusion][grad]") {
  for (auto fmt : {DataFormat::NCHW, DataFormat::NHWC}) {
    INFO("format " << to_string(fmt));
    test::gradcheck<Sequential<BatchNorm2d<3, FusedRelu>>>({3, 4, 5}, 3, fmt);
    test::gradcheck<Sequential<BatchNorm2d<3, FusedGelu>>>({3, 4, 5}, 3, fmt);
    test::gradcheck<Residual<Sequential<Conv2d<3, 3, 3>>, Identity, FusedRelu>>({3, 4, 4}, 2, fmt);
  }
}
