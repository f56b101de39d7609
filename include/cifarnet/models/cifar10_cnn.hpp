// cifarnet/models/cifar10_cnn.hpp — the classic TensorFlow CIFAR-10 tutorial
// CNN (tensorflow/models tutorials/image/cifar10/cifar10.py), TF_SEMANTICS.md §4.
//
// Input 24×24×3 (per-image standardized crops). conv1 5×5/64 + bias + ReLU,
// max-pool 3×3/2 SAME, LRN(4, 1.0, 0.001/9, 0.75); conv2 5×5/64 + bias +
// ReLU, LRN, max-pool; flatten; local3 dense 384 + ReLU; local4 dense 192 +
// ReLU; softmax_linear dense 10. Parameter names follow the tutorial
// (conv1/weights, local3/biases, softmax_linear/weights, …). A Tap after each
// layer's output (after its ReLU; softmax_linear's logits) named as the layer
// gives the activations the tutorial summarizes (_activation_summary):
// Model::activation("conv1") … ("softmax_linear"). Taps pass their input on
// unchanged and hold no parameters.
//
// cifar10_cnn_options() sets the tutorial's initializers (truncated normal
// 1e-4 for the convs, as the seed's cifar10.py writes them; 0.04 for
// local3/local4, 1/192 for softmax_linear; biases 0.0 / 0.1). (TensorFlow's
// later versions of the tutorial use 5e-2 for the convs; pass your own
// NetOptions for that.) The tutorial trains every variable but decays only the
// local3 and local4 weights (its loss adds 0.004 · l2 over exactly those):
// cifar10_cnn_decayed() names them for the optimizer chain's weight decay,
//   optim::WeightDecayOptions(0.004).decay(optim::Selection(cifar10_cnn_decayed())).
#pragma once

#include <string>
#include <vector>

#include "cifarnet/core/name_pattern.hpp"
#include "cifarnet/layers.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/nn/sequential.hpp"

namespace cifarnet {
namespace cnn {
CIFARNET_NAME(conv1);
CIFARNET_NAME(conv2);
CIFARNET_NAME(local3);
CIFARNET_NAME(local4);
CIFARNET_NAME(softmax_linear);
}  // namespace cnn

/// The tutorial CNN (logits for 10 classes).
using Cifar10Cnn =
    Sequential<Named<cnn::conv1, Conv2d<3, 64, 5, 1, Padding::Same, WithBias>>, ReLU, Tap<cnn::conv1>,
               MaxPool2d<3, 2>, TutorialLrn, Named<cnn::conv2, Conv2d<64, 64, 5, 1, Padding::Same, WithBias>>,
               ReLU, Tap<cnn::conv2>, TutorialLrn, MaxPool2d<3, 2>, Flatten,
               Named<cnn::local3, Dense<0, 384>>, ReLU, Tap<cnn::local3>, Named<cnn::local4, Dense<384, 192>>,
               ReLU, Tap<cnn::local4>, Named<cnn::softmax_linear, Dense<192, 10>>, Tap<cnn::softmax_linear>>;

/// The names of its taps, in the network's order (the tutorial's
/// _activation_summary calls).
inline std::vector<std::string> cifar10_cnn_taps() {
  return {"conv1", "conv2", "local3", "local4", "softmax_linear"};
}

/// The tutorial's initializers.
inline NetOptions cifar10_cnn_options() {
  NetOptions o;
  o.init("conv1/weights", Initializer::truncated_normal(1e-4))
      .init("conv1/biases", Initializer::constant(0.0))
      .init("conv2/weights", Initializer::truncated_normal(1e-4))
      .init("conv2/biases", Initializer::constant(0.1))
      .init("local3/weights", Initializer::truncated_normal(0.04))
      .init("local3/biases", Initializer::constant(0.1))
      .init("local4/weights", Initializer::truncated_normal(0.04))
      .init("local4/biases", Initializer::constant(0.1))
      .init("softmax_linear/weights", Initializer::truncated_normal(1.0 / 192.0))
      .init("softmax_linear/biases", Initializer::constant(0.0));
  return o;
}

/// The parameters the tutorial decays (optim::WeightDecayOptions::decay).
inline std::vector<NamePattern> cifar10_cnn_decayed() { return {"local3/weights", "local4/weights"}; }

}  // namespace cifarnet
