// cifarnet/layers/options.hpp — named on/off options of the layer templates.
//
// A layer's yes/no choices are named values, not bare bools, so a type reads
// on its own:
//
//   Conv2d<3, 64, 5, 1, Padding::Same, WithBias>    // default: NoBias
//   Dense<64, 10, NoBias>                           // default: WithBias
//   BatchNorm2d<64, FusedRelu>                      // default: NoRelu
//   BatchNorm2d<256, FusedGelu>                     // GELU instead of ReLU
//   ConvBatchNorm<16, 32, 3, 2, Padding::Explicit, FusedRelu>
//   Residual<Body, Shortcut, FusedRelu>             // ReLU on the sum
//
// FusedRelu is "this layer is followed by max(., 0), computed in the same
// layer" (in one pass where the backend fuses it: backend_traits<B>::fused_relu).
// The parameters are declared `auto`, so a raw `true`/`1` still reaches the
// layer and fails there with a static_assert naming the expected values.
#pragma once

#include <type_traits>

namespace cifarnet {

/// Whether a Conv2d or Dense adds a bias (a parameter named `biases`).
enum class BiasTerm { Without, With };
inline constexpr BiasTerm NoBias = BiasTerm::Without;
inline constexpr BiasTerm WithBias = BiasTerm::With;

/// Whether a layer applies a ReLU to its output itself.
enum class ReluAfter { No, Fused };
inline constexpr ReluAfter NoRelu = ReluAfter::No;
inline constexpr ReluAfter FusedRelu = ReluAfter::Fused;

/// Whether a BatchNorm2d applies the exact GELU to its output itself (in
/// the same passes where the backend fuses it: backend_traits<B>::fused_gelu).
enum class GeluAfter { No, Fused };
inline constexpr GeluAfter FusedGelu = GeluAfter::Fused;

namespace detail {
/// V checked as a value of the option enum Option: `valid` is false for a
/// bool or a number (the layer's static_assert says what to pass), `on` is
/// whether it asks for the feature (false when not valid, so the only error
/// is the static_assert).
template <class Option, auto V>
struct NamedOption {
  static constexpr bool valid = std::is_same_v<std::remove_cv_t<decltype(V)>, Option>;
  static constexpr bool on = valid && static_cast<int>(V) == 1;
};
template <auto V>
using BiasOption = NamedOption<BiasTerm, V>;
template <auto V>
using ReluOption = NamedOption<ReluAfter, V>;
template <auto V>
using GeluOption = NamedOption<GeluAfter, V>;
}  // namespace detail

}  // namespace cifarnet
