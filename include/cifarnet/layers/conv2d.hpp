// cifarnet/layers/conv2d.hpp — 2-D convolution.
//
// Conv2d<In, Out, K, S, P, Bias>: K×K kernel, stride S, padding P (TF SAME,
// VALID, or Explicit = ResNet's fixed padding for strided convs), optional
// bias. In = 0 infers the input channels at build time. Parameters:
// `weights` (K, K, In, Out) HWIO, TF's default Glorot-uniform initializer, and
// `biases` (Out) initialized to zero. Bias is WithBias or NoBias (the
// default; layers/options.hpp).
//
// The node is detail::ConvNode: what every backend's node is made of and
// the plain forward and backward through ops::Conv2d
// (layers/conv2d_parts.hpp), and on oneDNN its specialization
// (layers/conv2d_onednn.hpp), which takes the convolution algorithm and
// precision from NetOptions::conv_algorithm and conv_precision and offers
// ConvBatchNorm its bf16 hand-overs and own kernels.
#pragma once

#include "cifarnet/layers/conv2d_onednn.hpp"
#include "cifarnet/layers/conv2d_parts.hpp"
#include "cifarnet/layers/layer.hpp"
#include "cifarnet/layers/options.hpp"

namespace cifarnet {

template <int In, int Out, int K, int S = 1, Padding P = Padding::Same, auto BiasOpt = NoBias>
struct Conv2d : LayerBase {
  static_assert(detail::BiasOption<BiasOpt>::valid,
                "cifarnet: Conv2d<In, Out, K, S, P, Bias>: Bias must be WithBias or NoBias (not a bool).");
  static_assert(In >= 0, "cifarnet: Conv2d<In, ...>: In must be >= 0 (0 = inferred from the input).");
  static_assert(Out > 0, "cifarnet: Conv2d<In, Out, ...>: Out (output channels) must be positive.");
  static_assert(K > 0, "cifarnet: Conv2d<In, Out, K>: kernel size K must be positive.");
  static_assert(S > 0, "cifarnet: Conv2d<In, Out, K, S>: stride S must be positive.");
  static constexpr const char* kind = "conv";
  static constexpr int in_channels = In == 0 ? -1 : In;
  static constexpr int out_channels(int) { return Out; }
  static constexpr bool Bias = detail::BiasOption<BiasOpt>::on;
  static constexpr int kernel_size = K;
  static constexpr int stride = S;
  static constexpr Padding padding = P;
  static plan::Attrs plan_attrs() {
    plan::Attrs a;
    a.kernel = K;
    a.stride = S;
    a.bias = Bias;
    return a;
  }

  /// The node: detail::ConvNode (layers/conv2d_parts.hpp: a forward and a
  /// backward through ops::Conv2d), on oneDNN its specialization
  /// (layers/conv2d_onednn.hpp).
  template <class B, class T>
  class Node : public detail::ConvNode<B, T, Conv2d> {};
};

}  // namespace cifarnet
