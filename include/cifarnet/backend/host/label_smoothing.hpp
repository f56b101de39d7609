// cifarnet/backend/host/label_smoothing.hpp — softmax cross-entropy against
// label-smoothed targets, as host loops shared by the CPU backends. Logits
// are n rows of k values, row-major; sums are accumulated in double with the
// log-sum-exp shift.
//
// The target of row i is q = (1 − s)·onehot(y_i) + s/k (PyTorch's
// F.cross_entropy(..., label_smoothing=s)), so
//   loss_i = lse(z_i) − (1 − s)·z_i[y_i] − (s/k)·Σ_j z_i[j],
//   d loss_i / d z_i[j] = softmax(z_i)[j] − q[j].
// The reduction is the sum over rows or their mean (gradient divided by n).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cifarnet/backend/host/classify.hpp"
#include "cifarnet/core/error.hpp"

namespace cifarnet::backend::host {

/// Sum (mean = false) or mean (mean = true) over n rows of the smoothed
/// cross-entropy; dz (if not null) receives its gradient. s in [0, 1].
template <class T>
double smoothed_softmax_cross_entropy(std::size_t n, std::size_t k, const T* logits,
                                      const std::int32_t* labels, double s, bool mean, T* dz) {
  if (n == 0 || k == 0) throw ShapeError("softmax cross-entropy of empty logits");
  check_labels(n, k, labels);
  const double off = s / double(k), on = 1.0 - s + off;
  const double scale = mean ? 1.0 / double(n) : 1.0;
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const T* z = logits + i * k;
    const std::size_t y = std::size_t(labels[i]);
    const double lse = log_sum_exp(z, k);
    double zsum = 0;
    for (std::size_t j = 0; j < k; ++j) zsum += double(z[j]);
    total += lse - (1.0 - s) * double(z[y]) - off * zsum;
    if (dz)
      for (std::size_t j = 0; j < k; ++j)
        dz[i * k + j] = T((std::exp(double(z[j]) - lse) - (y == j ? on : off)) * scale);
  }
  return total * scale;
}

}  // namespace cifarnet::backend::host
