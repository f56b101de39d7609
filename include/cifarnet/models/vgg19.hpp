// cifarnet/models/vgg19.hpp — the VGG-19 feature extractor of the style
// transfer seed (TF_SEMANTICS.md §6), composed like any other cifarnet network.
//
// Every VGG conv is Named<convX_Y, Conv2d<In, Out, 3, 1, Same, WithBias>>, then
// ReLU, then Tap<convX_Y>: Model::activation("conv4_2") is the ReLU output
// the seed calls graph['conv4_2'], and Model::tap_gradient injects a loss
// gradient there. The max-pools are 2x2 stride-2 SAME average pools
// (padding excluded from the mean, TF's avg_pool); the FC layers are
// dropped. Parameters: "conv1_1/weights" (3, 3, In, Out) HWIO and
// "conv1_1/biases" (Out).
//
//   Vgg19Features<D>      conv1_1 ... conv5_1 (the deepest layer the seed's
//                         losses use; what TF actually evaluates)
//   Vgg19FullFeatures<D>  all 16 convs and the fifth pool (the seed's graph)
//
// D divides every channel count (64/D, 128/D, 256/D, 512/D): D = 1 is VGG-19;
// D = 16 or 32 gives a tiny net of the same structure for tests and demos.
// Weights are frozen by the caller (Model::set_weight_gradients(false)); they
// come from MatConvNet's imagenet-vgg-verydeep-19.mat (io/matconvnet.hpp
// reads it into ConvWeights; load_vgg19_weights copies them into the arena)
// or are random (vgg19_random_options(), for timing and demos).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/layers.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/nn/sequential.hpp"

namespace cifarnet {
namespace vgg {
CIFARNET_NAME(conv1_1);
CIFARNET_NAME(conv1_2);
CIFARNET_NAME(conv2_1);
CIFARNET_NAME(conv2_2);
CIFARNET_NAME(conv3_1);
CIFARNET_NAME(conv3_2);
CIFARNET_NAME(conv3_3);
CIFARNET_NAME(conv3_4);
CIFARNET_NAME(conv4_1);
CIFARNET_NAME(conv4_2);
CIFARNET_NAME(conv4_3);
CIFARNET_NAME(conv4_4);
CIFARNET_NAME(conv5_1);
CIFARNET_NAME(conv5_2);
CIFARNET_NAME(conv5_3);
CIFARNET_NAME(conv5_4);

/// Channel counts of VGG-19 divided by D.
template <int D>
struct Widths {
  static_assert(D >= 1 && 64 % D == 0,
                "cifarnet: VGG-19 width divisor D must divide 64 (1, 2, 4, 8, 16, 32 or 64).");
  static constexpr int c1 = 64 / D, c2 = 128 / D, c3 = 256 / D, c4 = 512 / D;
};

/// conv 3x3 stride 1 SAME + bias, ReLU, and a tap named like the conv.
template <class Name, int In, int Out>
using Conv = Sequential<Named<Name, Conv2d<In, Out, 3, 1, Padding::Same, WithBias>>, ReLU, Tap<Name>>;
/// The seed's replacement of VGG's max-pools.
using Pool = AvgPool2d<2, 2, Padding::Same>;

template <int D>
using Blocks1To4 =
    Sequential<Conv<conv1_1, 3, Widths<D>::c1>, Conv<conv1_2, Widths<D>::c1, Widths<D>::c1>, Pool,
               Conv<conv2_1, Widths<D>::c1, Widths<D>::c2>, Conv<conv2_2, Widths<D>::c2, Widths<D>::c2>, Pool,
               Conv<conv3_1, Widths<D>::c2, Widths<D>::c3>, Conv<conv3_2, Widths<D>::c3, Widths<D>::c3>,
               Conv<conv3_3, Widths<D>::c3, Widths<D>::c3>, Conv<conv3_4, Widths<D>::c3, Widths<D>::c3>, Pool,
               Conv<conv4_1, Widths<D>::c3, Widths<D>::c4>, Conv<conv4_2, Widths<D>::c4, Widths<D>::c4>,
               Conv<conv4_3, Widths<D>::c4, Widths<D>::c4>, Conv<conv4_4, Widths<D>::c4, Widths<D>::c4>,
               Pool>;
}  // namespace vgg

/// VGG-19 up to conv5_1's ReLU (taps at all 13 convs), width divisor D.
template <int D = 1>
using Vgg19Features =
    Sequential<vgg::Blocks1To4<D>, vgg::Conv<vgg::conv5_1, vgg::Widths<D>::c4, vgg::Widths<D>::c4>>;

/// The whole VGG-19 conv stack (16 convs, 5 average pools), width divisor D.
template <int D = 1>
using Vgg19FullFeatures =
    Sequential<vgg::Blocks1To4<D>, vgg::Conv<vgg::conv5_1, vgg::Widths<D>::c4, vgg::Widths<D>::c4>,
               vgg::Conv<vgg::conv5_2, vgg::Widths<D>::c4, vgg::Widths<D>::c4>,
               vgg::Conv<vgg::conv5_3, vgg::Widths<D>::c4, vgg::Widths<D>::c4>,
               vgg::Conv<vgg::conv5_4, vgg::Widths<D>::c4, vgg::Widths<D>::c4>, vgg::Pool>;

/// One VGG-19 conv layer: its name, its 0-based index in MatConvNet's
/// `layers` cell array (TF_SEMANTICS.md §6, the seed's indices) and its channel counts
/// at full width.
struct Vgg19Conv {
  const char* name;
  int mat_index;
  int in, out;
};

/// The 16 convs of VGG-19 in order.
inline const std::array<Vgg19Conv, 16>& vgg19_convs() {
  static const std::array<Vgg19Conv, 16> t{{{"conv1_1", 0, 3, 64},
                                            {"conv1_2", 2, 64, 64},
                                            {"conv2_1", 5, 64, 128},
                                            {"conv2_2", 7, 128, 128},
                                            {"conv3_1", 10, 128, 256},
                                            {"conv3_2", 12, 256, 256},
                                            {"conv3_3", 14, 256, 256},
                                            {"conv3_4", 16, 256, 256},
                                            {"conv4_1", 19, 256, 512},
                                            {"conv4_2", 21, 512, 512},
                                            {"conv4_3", 23, 512, 512},
                                            {"conv4_4", 25, 512, 512},
                                            {"conv5_1", 28, 512, 512},
                                            {"conv5_2", 30, 512, 512},
                                            {"conv5_3", 32, 512, 512},
                                            {"conv5_4", 34, 512, 512}}};
  return t;
}

/// The 43 layer names of imagenet-vgg-verydeep-19.mat, in order (convs,
/// ReLUs, pools, the FC layers and the softmax).
inline const std::array<const char*, 43>& vgg19_mat_layer_names() {
  static const std::array<const char*, 43> t{
      "conv1_1", "relu1_1", "conv1_2", "relu1_2", "pool1",   "conv2_1", "relu2_1", "conv2_2", "relu2_2",
      "pool2",   "conv3_1", "relu3_1", "conv3_2", "relu3_2", "conv3_3", "relu3_3", "conv3_4", "relu3_4",
      "pool3",   "conv4_1", "relu4_1", "conv4_2", "relu4_2", "conv4_3", "relu4_3", "conv4_4", "relu4_4",
      "pool4",   "conv5_1", "relu5_1", "conv5_2", "relu5_2", "conv5_3", "relu5_3", "conv5_4", "relu5_4",
      "pool5",   "fc6",     "relu6",   "fc7",     "relu7",   "fc8",     "prob"};
  return t;
}

/// Where to get the real weights, and their size.
inline constexpr const char* kVgg19MatUrl =
    "http://www.vlfeat.org/matconvnet/models/imagenet-vgg-verydeep-19.mat";
inline constexpr const char* kVgg19MatFile = "imagenet-vgg-verydeep-19.mat";
inline constexpr unsigned long long kVgg19MatBytes = 534904783ULL;

/// The ImageNet mean pixel (RGB) the seed subtracts.
inline constexpr std::array<float, 3> kVgg19MeanPixel{123.68f, 116.779f, 103.939f};

/// The weights of one conv layer as read from a file.
struct ConvWeights {
  std::string name;                  ///< "conv1_1"
  int index = -1;                    ///< position in the file's layer list (0-based), -1 if not from a list
  std::array<std::size_t, 4> shape;  ///< H, W, Cin, Cout
  std::vector<float> weights;        ///< HWIO, row-major (H*W*Cin*Cout values)
  std::vector<float> bias;           ///< Cout values
};

/// Random VGG-shaped weights: He-normal convolution weights (truncated,
/// stddev sqrt(2 / fan_in)), zero biases, so activations keep their scale
/// through the 16 layers. For timing and demos, never a substitute for the
/// trained weights.
inline NetOptions vgg19_random_options() {
  NetOptions o;
  o.init("*/weights", Initializer::he_normal());
  return o;
}

/// Copies conv weights into a VGG arena: every "<conv>/weights" and
/// "<conv>/biases" parameter must have an entry in `convs` with exactly its
/// shape. DataError naming the layer when one is missing (`source` names the
/// file in messages), ShapeError naming the layer and both shapes when a
/// shape differs. Nothing is written unless every layer checks out.
template <class T>
void load_vgg19_weights(Parameters<T>& params, const std::vector<ConvWeights>& convs,
                        const std::string& source) {
  struct Plan {
    std::size_t w, b;
    const ConvWeights* c;
  };
  std::vector<Plan> plan;
  for (const auto& conv : vgg19_convs()) {
    const auto w = params.find(std::string(conv.name) + "/weights");
    if (!w) continue;
    const auto b = params.find(std::string(conv.name) + "/biases");
    if (!b)
      throw Error(cifarnet::detail::concat("load_vgg19_weights: the network has '", conv.name,
                                           "/weights' but no '", conv.name, "/biases'"));
    const ConvWeights* found = nullptr;
    for (const auto& c : convs)
      if (c.name == conv.name) found = &c;
    if (!found)
      throw DataError(cifarnet::detail::concat("'", source, "' has no weights for layer '", conv.name,
                                               "' (MatConvNet layer index ", conv.mat_index, ")"));
    const ParamInfo& wi = params.info(*w);
    const std::vector<std::size_t> fs(found->shape.begin(), found->shape.end());
    if (wi.shape != fs)
      throw ShapeError(cifarnet::detail::concat(
          "layer '", conv.name, "' in '", source, "' has weights ", fs[0], "x", fs[1], "x", fs[2], "x", fs[3],
          " but the network expects ", wi.shape[0], "x", wi.shape[1], "x", wi.shape[2], "x", wi.shape[3],
          " (H x W x Cin x Cout; is the width divisor right?)"));
    if (found->weights.size() != wi.size)
      throw ShapeError(cifarnet::detail::concat("layer '", conv.name, "' in '", source, "' holds ",
                                                found->weights.size(), " weights for shape ", fs[0], "x",
                                                fs[1], "x", fs[2], "x", fs[3]));
    if (found->bias.size() != params.info(*b).size)
      throw ShapeError(cifarnet::detail::concat("layer '", conv.name, "' in '", source, "' has ",
                                                found->bias.size(), " biases but the network expects ",
                                                params.info(*b).size));
    plan.push_back({*w, *b, found});
  }
  if (plan.empty()) throw Error("load_vgg19_weights: the network has no VGG-19 conv layer");
  for (const auto& p : plan) {
    std::copy(p.c->weights.begin(), p.c->weights.end(), params.value(p.w));
    std::copy(p.c->bias.begin(), p.c->bias.end(), params.value(p.b));
  }
}

}  // namespace cifarnet
