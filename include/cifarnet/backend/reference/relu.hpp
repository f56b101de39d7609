// cifarnet/backend/reference/relu.hpp — rectified linear unit. Backward uses
// the output (y > 0), so it works in place.
#pragma once

#include <cstddef>

#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct Relu<backend::Reference, T> {
  using Dev = Device<backend::Reference>;
  void forward(Dev&, std::size_t n, const T* x, T* y) {
    // NaN propagates (TF's relu), so a NaN loss is seen and training stops.
    for (std::size_t i = 0; i < n; ++i) y[i] = x[i] < T(0) ? T(0) : x[i];
  }
  void backward(Dev&, std::size_t n, const T* y, const T* dy, T* dx) {
    for (std::size_t i = 0; i < n; ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
  }
};

}  // namespace ops
}  // namespace cifarnet
