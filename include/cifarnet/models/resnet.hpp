// cifarnet/models/resnet.hpp — ResNet v1 for CIFAR-10 as in TensorFlow's
// cifar10_estimator (cifar10_model.py + model_base.py), TF_SEMANTICS.md §3.
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
//
// ResNet<Block, Depths...>: the ImageNet ResNets' stage layout for CIFAR-size
// inputs (a 3×3/64 stem, no max pooling), one stage per depth with widths
// 64, 128, 256, 512 and strides 1, 2, 2, 2, each stage's depth fixed at
// compile time (RepeatN):
//
//   using ResNet18 = ResNet<resnet::BasicBlock, 2, 2, 2, 2>;   // 11,173,962 parameters
//   using ResNet34 = ResNet<resnet::BasicBlock, 3, 4, 6, 3>;
//   Model<ResNet18, backend::OneDnn> net({3, 32, 32}, fmt, NetOptions(), seed);
#pragma once

#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cifarnet/layers.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/nn/sequential.hpp"

namespace cifarnet {
namespace resnet {

CIFARNET_NAME(stem);
CIFARNET_NAME(stage1);
CIFARNET_NAME(stage2);
CIFARNET_NAME(stage3);
CIFARNET_NAME(stage4);
CIFARNET_NAME(head);

/// Conv (no bias; explicit padding when strided) followed by batch norm
/// (and ReLU, fused into the batch norm, with FusedRelu); folded into one
/// convolution for inference (layers/conv_bn.hpp).
template <int In, int Out, int S = 1, auto Relu = NoRelu>
using ConvBN = ConvBatchNorm<In, Out, 3, S, (S == 1 ? Padding::Same : Padding::Explicit), Relu>;

/// The same as two separate layers (the reference the fused ones are tested against).
template <int In, int Out, int S = 1>
using ConvBNUnfused =
    Sequential<Conv2d<In, Out, 3, S, (S == 1 ? Padding::Same : Padding::Explicit)>, BatchNorm2d<Out>>;

/// model_base._residual_v1: conv-BN-ReLU, conv-BN, plus the shortcut, then
/// ReLU (the BN+ReLU and add+ReLU pairs fused; same names and values as the
/// unfused Sequential<Residual<Sequential<ConvBN, ReLU, ConvBN>, Shortcut>, ReLU>).
template <int In, int Out, int S>
using BlockV1 = Residual<Sequential<ConvBN<In, Out, S, FusedRelu>, ConvBN<Out, Out>>,
                         PoolPadShortcut<In, Out, S>, FusedRelu>;

/// The same block without fusion (the reference the fused one is tested against).
template <int In, int Out, int S>
using BlockV1Unfused =
    Sequential<Residual<Sequential<ConvBNUnfused<In, Out, S>, ReLU, ConvBNUnfused<Out, Out>>,
                        PoolPadShortcut<In, Out, S>>,
               ReLU>;

/// A stage: the first block maps In -> Out with stride S, then n - 1 blocks.
template <int In, int Out, int S>
using Stage = Sequential<BlockV1<In, Out, S>, Repeat<BlockV1<Out, Out, 1>, -1>>;

/// The shortcut of the ImageNet ResNets' basic block: identity where the
/// shape is kept, else a strided 1×1 convolution + batch norm (projection).
template <int In, int Out, int S>
using ProjectionShortcut =
    std::conditional_t<In == Out && S == 1, Identity, ConvBatchNorm<In, Out, 1, S, Padding::Same, NoRelu>>;

/// ResNet-18/34's basic block: conv-BN-ReLU, conv-BN, plus the projection
/// shortcut, then ReLU.
template <int In, int Out, int S>
using BasicBlock = Residual<Sequential<ConvBN<In, Out, S, FusedRelu>, ConvBN<Out, Out>>,
                            ProjectionShortcut<In, Out, S>, FusedRelu>;

namespace detail {
template <int I>
using StageName = std::tuple_element_t<I, std::tuple<stage1, stage2, stage3, stage4>>;

template <template <int, int, int> class Block, int Width, int Classes, class Indices, int... Depths>
struct Stages;
template <template <int, int, int> class Block, int Width, int Classes, int... I, int... Depths>
struct Stages<Block, Width, Classes, std::integer_sequence<int, I...>, Depths...> {
  static_assert(sizeof...(Depths) >= 1 && sizeof...(Depths) <= 4,
                "cifarnet: ResNet<Block, Depths...>: 1 to 4 stages");
  static_assert(((Depths >= 1) && ...),
                "cifarnet: ResNet<Block, Depths...>: every stage needs at least one block");
  // Stage I maps Width·2^(I-1) to Width·2^I channels (the first keeps Width)
  // with stride 2 (the first: 1), then Depth - 1 blocks that keep the shape.
  using type = Sequential<
      Rescale<std::ratio<1, 128>, std::ratio<-1>>, Named<stem, ConvBN<3, Width, 1, FusedRelu>>,
      Named<StageName<I>,
            Sequential<Block<(I == 0 ? Width : (Width << (I - 1))), (Width << I), (I == 0 ? 1 : 2)>,
                       RepeatN<Block<(Width << I), (Width << I), 1>, Depths - 1>>>...,
      Named<head, Sequential<GlobalAvgPool, Dense<(Width << (sizeof...(Depths) - 1)), Classes>>>>;
};
}  // namespace detail

}  // namespace resnet

/// A ResNet with a fixed depth per stage (see the file comment), 10 classes.
template <template <int, int, int> class Block, int... Depths>
using ResNet =
    typename resnet::detail::Stages<Block, 64, 10, std::make_integer_sequence<int, sizeof...(Depths)>,
                                    Depths...>::type;

/// ResNet-18 for CIFAR-10 (kuangliu-style: 3×3 stem, projection shortcuts).
using ResNet18Cifar = ResNet<resnet::BasicBlock, 2, 2, 2, 2>;

/// ResNet v1 for CIFAR (6n + 2 layers; n = NetOptions::repeat).
template <int Classes = 11>
using ResNetCifar = Sequential<
    Rescale<std::ratio<1, 128>, std::ratio<-1>>, Named<resnet::stem, resnet::ConvBN<3, 16, 1, FusedRelu>>,
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
