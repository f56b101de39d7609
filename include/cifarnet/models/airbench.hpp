// cifarnet/models/airbench.hpp — the network of the airbench94 CIFAR-10
// recipe (public repository KellerJordan/cifar10-airbench,
// airbench94_muon.py), layer for layer:
//
//   whiten   2×2 convolution 3 → 24, valid padding, with bias (its filters
//            set from the data by whitening_filters, never trained)
//   GELU
//   block1   ConvGroup 24 → 64     each: conv 3×3 (same, no bias) → max pool
//   block2   ConvGroup 64 → 256          2 → BN+GELU → conv 3×3 → BN+GELU
//   block3   ConvGroup 256 → 256
//   max pool 3 (valid: 3×3 → 1×1)
//   head     dense 256 → 10 without bias, then × 1/256
//
// BatchNorm as the recipe: ε 1e-12, moving statistics moved by 0.4 of the
// batch's each step (decay 0.6; PyTorch writes it momentum 0.4), scale fixed
// at 1 (no optimizer selects "*/gamma"). airbench_options() sets both.
// recipes/airbench.hpp's airbench_init() gives the weights the recipe's
// initial values.
//
//   Model<Airbench94, backend::OneDnn> net({3, 32, 32}, fmt, airbench_options(), seed);
#pragma once

#include <ratio>

#include "cifarnet/layers/activation.hpp"
#include "cifarnet/layers/batch_norm.hpp"
#include "cifarnet/layers/conv2d.hpp"
#include "cifarnet/layers/dense.hpp"
#include "cifarnet/layers/pool.hpp"
#include "cifarnet/layers/shape_ops.hpp"
#include "cifarnet/nn/sequential.hpp"

namespace cifarnet {

namespace airbench {
CIFARNET_NAME(whiten);
CIFARNET_NAME(block1);
CIFARNET_NAME(block2);
CIFARNET_NAME(block3);
CIFARNET_NAME(head);

/// conv 3×3 → max pool 2 → BN → GELU → conv 3×3 → BN → GELU, each BN and
/// its GELU one layer (BatchNorm2d<Out, FusedGelu>: one pass fewer over the
/// activations each way where the backend fuses them).
template <int In, int Out>
using ConvGroup = Sequential<Conv2d<In, Out, 3>, MaxPool2d<2, 2, Padding::Valid>, BatchNorm2d<Out, FusedGelu>,
                             Conv2d<Out, Out, 3>, BatchNorm2d<Out, FusedGelu>>;
}  // namespace airbench

/// The airbench94 network (see the file comment).
using Airbench94 =
    Sequential<Named<airbench::whiten, Conv2d<3, 24, 2, 1, Padding::Valid, WithBias>>, GELU,
               Named<airbench::block1, airbench::ConvGroup<24, 64>>,
               Named<airbench::block2, airbench::ConvGroup<64, 256>>,
               Named<airbench::block3, airbench::ConvGroup<256, 256>>, MaxPool2d<3, 3, Padding::Valid>,
               Named<airbench::head, Dense<256, 10, NoBias>>, Rescale<std::ratio<1, 256>>>;

/// BatchNorm's ε (1e-12) and decay (0.6) of the recipe.
inline NetOptions airbench_options() {
  NetOptions o;
  o.bn_decay = 0.6;
  o.bn_epsilon = 1e-12;
  return o;
}

}  // namespace cifarnet
