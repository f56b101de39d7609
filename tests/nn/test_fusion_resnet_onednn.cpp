// The whole fused ResNet on oneDNN in float against the unfused one on the
// reference backend in double (test_fusion_reference.cpp has the reference
// backend's fused form).
#include <cifarnet/backend/onednn.hpp>

#include "nn/fusion_compare.hpp"

using namespace cifarnet;

TEST_CASE("The fused ResNet on oneDNN equals the unfused ResNet: names, outputs, gradients and BN statistics",
          "[nn][fusion][resnet]") {
  test::compare_formats<ResNetCifar<5>, test::UnfusedResNet<5>, backend::OneDnn, float>({3, 8, 8}, 4, 1e-4,
                                                                                        resnet_options(14));
}

// The same with every ConvBatchNorm's backward run a range of images at a
// time (NetOptions::conv_bn_chunk_bytes; layers/conv_bn.hpp): 512 bytes
// hold one image of the 8x8 stage-1 maps (16 channels: 4 KiB) or less, so
// every layer runs one image per range.
TEST_CASE("The fused ResNet on oneDNN with ranged backward passes equals the unfused ResNet",
          "[nn][fusion][resnet][conv_bn]") {
  test::compare_formats<ResNetCifar<5>, test::UnfusedResNet<5>, backend::OneDnn, float>(
      {3, 8, 8}, 4, 1e-4, resnet_options(14).with_conv_bn_chunk_bytes(512));
}
