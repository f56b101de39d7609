// cifarnet/core/init.hpp — parameter initializers with TensorFlow's semantics.
//
// Fans follow TF's _compute_fans: a rank-2 shape is (in, out); a rank-4 shape
// is a conv kernel in HWIO order (fan_in = H·W·I, fan_out = H·W·O); a rank-1
// shape uses its length for both. All draws come from cifarnet::Rng, so a
// seed fixes the values on every platform.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/rng.hpp"

namespace cifarnet {

struct Fans {
  double in = 1, out = 1;
};

inline Fans compute_fans(const std::vector<std::size_t>& shape) {
  if (shape.empty()) return {};
  if (shape.size() == 1) return {double(shape[0]), double(shape[0])};
  if (shape.size() == 2) return {double(shape[0]), double(shape[1])};
  double receptive = 1;
  for (std::size_t i = 0; i + 2 < shape.size(); ++i) receptive *= double(shape[i]);
  return {receptive * double(shape[shape.size() - 2]), receptive * double(shape.back())};
}

/// How a parameter is filled before training.
struct Initializer {
  enum class Kind { Constant, TruncatedNormal, Normal, Uniform, GlorotUniform, VarianceScaling };
  enum class Mode { FanIn, FanOut, FanAvg };
  Kind kind = Kind::Constant;
  double a = 0.0, b = 0.0;  // constant value | (mean, stddev) | (lo, hi) | scale
  Mode mode = Mode::FanIn;

  static Initializer zeros() { return constant(0.0); }
  static Initializer ones() { return constant(1.0); }
  static Initializer constant(double v) { return {Kind::Constant, v, 0.0, Mode::FanIn}; }
  /// tf.truncated_normal_initializer(mean, stddev).
  static Initializer truncated_normal(double stddev, double mean = 0.0) {
    return {Kind::TruncatedNormal, mean, stddev, Mode::FanIn};
  }
  static Initializer normal(double stddev, double mean = 0.0) {
    return {Kind::Normal, mean, stddev, Mode::FanIn};
  }
  static Initializer uniform(double lo, double hi) { return {Kind::Uniform, lo, hi, Mode::FanIn}; }
  /// tf.glorot_uniform_initializer: U(±sqrt(6 / (fan_in + fan_out))), TF's
  /// default for conv and dense kernels.
  static Initializer glorot_uniform() { return {Kind::GlorotUniform, 0.0, 0.0, Mode::FanAvg}; }
  /// tf.variance_scaling_initializer(scale, mode, 'truncated_normal'):
  /// stddev = sqrt(scale / fan) / 0.87962566103423978.
  static Initializer variance_scaling(double scale = 2.0, Mode mode = Mode::FanIn) {
    return {Kind::VarianceScaling, scale, 0.0, mode};
  }
  /// He et al. initialization (variance scaling 2.0 over fan_in).
  static Initializer he_normal() { return variance_scaling(2.0, Mode::FanIn); }

  template <class T>
  void fill(T* p, std::size_t n, const std::vector<std::size_t>& shape, Rng& rng) const {
    const Fans f = compute_fans(shape);
    switch (kind) {
      case Kind::Constant:
        for (std::size_t i = 0; i < n; ++i) p[i] = T(a);
        break;
      case Kind::TruncatedNormal:
        for (std::size_t i = 0; i < n; ++i) p[i] = T(rng.truncated_normal(a, b));
        break;
      case Kind::Normal:
        for (std::size_t i = 0; i < n; ++i) p[i] = T(rng.normal(a, b));
        break;
      case Kind::Uniform:
        for (std::size_t i = 0; i < n; ++i) p[i] = T(rng.uniform(a, b));
        break;
      case Kind::GlorotUniform: {
        const double limit = std::sqrt(6.0 / (f.in + f.out));
        for (std::size_t i = 0; i < n; ++i) p[i] = T(rng.uniform(-limit, limit));
        break;
      }
      case Kind::VarianceScaling: {
        const double fan = mode == Mode::FanIn ? f.in : mode == Mode::FanOut ? f.out : (f.in + f.out) / 2;
        const double stddev = std::sqrt(a / std::max(1.0, fan)) / 0.87962566103423978;
        for (std::size_t i = 0; i < n; ++i) p[i] = T(rng.truncated_normal(0.0, stddev));
        break;
      }
    }
  }
};

}  // namespace cifarnet
