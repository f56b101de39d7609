// cifarnet/backend/reference/gelu.hpp — the Gaussian error linear unit in its
// exact erf form (PyTorch's default nn.GELU(), approximate='none'):
//   y = x·Φ(x) = 0.5·x·(1 + erf(x/√2)),  dy/dx = Φ(x) + x·φ(x),
// with φ(x) = exp(−x²/2)/√(2π). Backward uses the input x.
#pragma once

#include <cmath>
#include <cstddef>

#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct Gelu<backend::Reference, T> {
  using Dev = Device<backend::Reference>;
  /// y = x·Φ(x); x == y allowed.
  void forward(Dev&, std::size_t n, const T* x, T* y) {
    for (std::size_t i = 0; i < n; ++i) y[i] = T(0.5) * x[i] * (T(1) + std::erf(x[i] * T(kInvSqrt2)));
  }
  /// dx = dy·(Φ(x) + x·φ(x)); dy == dx allowed.
  void backward(Dev&, std::size_t n, const T* x, const T* dy, T* dx) {
    for (std::size_t i = 0; i < n; ++i) {
      const T cdf = T(0.5) * (T(1) + std::erf(x[i] * T(kInvSqrt2)));
      const T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * x[i] * x[i]);
      dx[i] = dy[i] * (cdf + x[i] * pdf);
    }
  }

 private:
  static constexpr double kInvSqrt2 = 0.70710678118654752440;
  static constexpr double kInvSqrt2Pi = 0.39894228040143267794;
};

}  // namespace ops
}  // namespace cifarnet
