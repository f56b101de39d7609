// cifarnet/ops/conv_algorithm.hpp — which convolution algorithm and which
// arithmetic a backend may use: options of the convolution op
// (ops::Conv2d::set_algorithm / set_precision on backends whose traits offer
// them, backend/tags.hpp), chosen by NetOptions::conv_algorithm and
// NetOptions::conv_precision (nn/context.hpp). Backends without a choice (the
// reference, CUDA) ignore them; the oneDNN backend decides per geometry
// (backend/onednn/conv2d.hpp).
//
//   Direct    the direct algorithm everywhere
//   Winograd  Winograd F(4x4, 3x3) wherever the backend offers it (oneDNN:
//             3x3, stride 1, channel counts it supports, AVX-512 only; where
//             it has none, and on Zen 4 (AVX-512 in 256-bit halves, where
//             they were measured faster), the project's own AVX2 kernels
//             for NHWC 3x3 SAME convolutions with channel counts multiples
//             of 16, backend/onednn/winograd.hpp), else direct. In fp32 training
//             on AVX2 and Zen 4 CPUs, ConvBatchNorm's own conv + batch norm
//             kernels run the own Winograd inside them from 32 channels (at
//             16 they stay direct: no faster there) and keep their fusions
//             (ResNet-20 and -56 1.13x and 1.15x as fast on a Zen 4 EPYC)
//   Auto      Winograd only where it was measured to pay for the layout
//             conversions it needs on oneDNN (activations stay plain between
//             layers) and the weights are not being trained: 3x3 stride-1
//             convolutions on batches of at most 4 images in inference or
//             with frozen weights (style transfer's large single images),
//             and the folded conv+BN of inference (layers/conv_bn.hpp) at
//             any batch size when it has at least 8 input channels; direct
//             elsewhere, so training never depends on how many images a
//             replica holds. The default.
//
// Winograd trades some accuracy (relative errors around 1e-5 instead of
// 1e-6 in float) for up to 2x fewer multiplications.
#pragma once

namespace cifarnet {

/// Convolution algorithm choice (see the header comment).
enum class ConvAlgorithm { Direct, Winograd, Auto };

// Precision of the convolutions' arithmetic:
//
//   F32   float everywhere (the default)
//   BF16  mixed precision: the convolution reads its input, weights and
//         output gradient rounded to bfloat16 and accumulates in float; its
//         output and both gradients are float, except inside ConvBatchNorm
//         (ResNet's conv+BN pairs) while training, where the convolution's
//         output and the batch norm's input gradient are handed over as
//         bfloat16 (layers/conv_bn.hpp). Master weights, the optimizer, batch
//         norm's arithmetic and statistics, the loss and every other layer
//         stay float (oneDNN: native on AVX512-BF16 CPUs, emulated on other
//         AVX-512 CPUs; where oneDNN has no bf16 kernel for a geometry that
//         convolution runs in float). bf16 keeps 8 significant bits: expect
//         relative errors around 3e-3 per convolution instead of 1e-6.
//         Winograd is float only, so BF16 convolutions are direct.
enum class ConvPrecision { F32, BF16 };

inline const char* to_string(ConvPrecision p) { return p == ConvPrecision::BF16 ? "bf16" : "fp32"; }

}  // namespace cifarnet
