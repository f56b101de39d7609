// cifarnet/models/resnet.hpp — ResNet v1 for CIFAR-10 as in TensorFlow's
// cifar10_estimator (cifar10_model.py + model_base.py), SPEC §3.
//
// Depth L = 6n + 2: a 3×3/16 stem conv + BN + ReLU, three stages of n blocks
// (16, 32, 64 filters; strides 1, 2, 2), global average pooling and a dense
// layer to 11 logits (10 classes + 1 spare, as in the seed). Block:
// conv3×3(stride) → BN → ReLU → conv3×3 → BN, plus the shortcut (identity,
// or avg-pool + zero channel padding when filters change), then ReLU.
// Convolutions have no bias; strided ones use TF's explicit padding.
// Input: raw pixels in [0, 255]; the model standardizes with x / 128 − 1.
//
//   auto opts = resnet_options(20);      // n = 3 blocks per stage
//   Model<ResNetCifar<>, backend::OneDnn> net({3, 32, 32}, fmt, opts, seed);
//
// Parameter names: stem/conv1/weights, stem/bn1/{gamma,beta,moving_mean,
// moving_variance}, stage1/block0/conv1/weights, stage1/block0/bn2/gamma, …,
// head/dense1/{weights,biases}.
#pragma once

#include <string>

#include "cifarnet/layers.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/nn/sequential.hpp"

namespace cifarnet {
namespace resnet {

CIFARNET_NAME(stem);
CIFARNET_NAME(stage1);
CIFARNET_NAME(stage2);
CIFARNET_NAME(stage3);
CIFARNET_NAME(head);

/// Conv (no bias; explicit padding when strided) followed by batch norm
/// (and ReLU, fused into the batch norm, when Relu); folded into one
/// convolution for inference (layers/conv_bn.hpp).
template <int In, int Out, int S = 1, bool Relu = false>
using ConvBN = ConvBatchNorm<In, Out, 3, S, (S == 1 ? Padding::Same : Padding::Explicit), Relu>;

/// The same as two separate layers (the reference the fused ones are tested against).
template <int In, int Out, int S = 1>
using ConvBNUnfused =
    Sequential<Conv2d<In, Out, 3, S, (S == 1 ? Padding::Same : Padding::Explicit)>, BatchNorm2d<Out>>;

/// model_base._residual_v1: conv-BN-ReLU, conv-BN, plus the shortcut, then
/// ReLU (the BN+ReLU and add+ReLU pairs fused; same names and values as the
/// unfused Sequential<Residual<Sequential<ConvBN, ReLU, ConvBN>, Shortcut>, ReLU>).
template <int In, int Out, int S>
using BlockV1 = Residual<Sequential<ConvBN<In, Out, S, true>, ConvBN<Out, Out>>, PoolPadShortcut<In, Out, S>,
                         /*Relu=*/true>;

/// The same block without fusion (the reference the fused one is tested against).
template <int In, int Out, int S>
using BlockV1Unfused =
    Sequential<Residual<Sequential<ConvBNUnfused<In, Out, S>, ReLU, ConvBNUnfused<Out, Out>>,
                        PoolPadShortcut<In, Out, S>>,
               ReLU>;

/// A stage: the first block maps In -> Out with stride S, then n - 1 blocks.
template <int In, int Out, int S>
using Stage = Sequential<BlockV1<In, Out, S>, Repeat<BlockV1<Out, Out, 1>, -1>>;

}  // namespace resnet

/// ResNet v1 for CIFAR (6n + 2 layers; n = NetOptions::repeat).
template <int Classes = 11>
using ResNetCifar = Sequential<
    Rescale<std::ratio<1, 128>, std::ratio<-1>>, Named<resnet::stem, resnet::ConvBN<3, 16, 1, true>>,
    Named<resnet::stage1, resnet::Stage<16, 16, 1>>, Named<resnet::stage2, resnet::Stage<16, 32, 2>>,
    Named<resnet::stage3, resnet::Stage<32, 64, 2>>,
    Named<resnet::head, Sequential<GlobalAvgPool, Dense<64, Classes>>>>;

/// NetOptions for a ResNet of `depth` layers (ConfigError unless depth = 6n + 2).
inline NetOptions resnet_options(int depth, double bn_decay = 0.997, double bn_epsilon = 1e-5) {
  if (depth < 8 || (depth - 2) % 6 != 0)
    throw ConfigError("--num-layers " + std::to_string(depth) +
                      ": ResNet depth must be 6n + 2 (e.g. 20, 32, 44, 56, 110)");
  NetOptions o;
  o.repeat = (depth - 2) / 6;
  o.bn_decay = bn_decay;
  o.bn_epsilon = bn_epsilon;
  return o;
}

}  // namespace cifarnet
