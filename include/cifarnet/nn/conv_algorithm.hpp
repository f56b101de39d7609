// cifarnet/nn/conv_algorithm.hpp — which convolution algorithm a backend
// may use (NetOptions::conv_algorithm). Backends without a choice (the
// reference) ignore it.
//
//   Direct    the direct algorithm everywhere
//   Winograd  Winograd F(4x4, 3x3) wherever the backend offers it (oneDNN:
//             3x3, stride 1, channel counts it supports), else direct
//   Auto      Winograd only where it was measured to pay for the layout
//             conversions it needs on oneDNN (activations stay plain between
//             layers) and the weights are not being trained: 3x3 stride-1
//             convolutions on batches of at most 4 images in inference or
//             with frozen weights (style transfer's large single images),
//             and the folded conv+BN of inference (layers/conv_bn.hpp) at
//             any batch size; direct elsewhere, so training never depends on
//             how many images a replica holds. The default.
//
// Winograd trades some accuracy (relative errors around 1e-5 instead of
// 1e-6 in float) for up to 2x fewer multiplications.
#pragma once

namespace cifarnet {

/// Convolution algorithm choice (see the header comment).
enum class ConvAlgorithm { Direct, Winograd, Auto };

}  // namespace cifarnet
