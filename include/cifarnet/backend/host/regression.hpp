// cifarnet/backend/host/regression.hpp — the mean squared error of a
// regression as a host loop (loss/losses.hpp's mean_squared_error), summed
// in double.
#pragma once

#include <cstddef>

namespace cifarnet::backend::host {

/// Mean of (p[i] − y[i])² over n elements (n > 0), accumulated in double;
/// when `dp` is not null it receives the gradient of that mean,
/// dp[i] = 2 (p[i] − y[i]) / n.
template <class T>
double mean_squared_error(std::size_t n, const T* p, const T* y, T* dp) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = double(p[i]) - double(y[i]);
    sum += d * d;
    if (dp) dp[i] = T(2.0 * d / double(n));
  }
  return sum / double(n);
}

}  // namespace cifarnet::backend::host
