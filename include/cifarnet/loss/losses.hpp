// cifarnet/loss/losses.hpp — losses and predictions on logits.
//
// Logits are (n, k, 1, 1) tensors (the output of a Dense head) in either
// format; since h = w = 1 the memory is (n, k) row-major either way.
//  - softmax_cross_entropy: mean sparse softmax cross-entropy, computed with
//    the log-sum-exp shift (stable for large logits); optionally writes
//    d(loss)/d(logits) = (softmax − onehot) / n.
//  - argmax, softmax, in_top_k(1) and accuracy for predictions.
// (Weight decay is an optimizer stage: optim::WeightDecay, optim/weight_decay.hpp.)
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/core/tensor.hpp"

namespace cifarnet {

namespace detail {
template <class T>
void check_logits(const Tensor<T>& logits, std::size_t labels) {
  if (logits.dimension() != 4 || logits.shape()[2] * logits.shape()[3] * logits.shape()[1] == 0)
    throw ShapeError("logits must be a non-empty 4-D tensor (n, k, 1, 1)");
  const std::size_t n = logits.shape()[0];
  if (labels != n)
    throw ShapeError("got " + std::to_string(labels) + " labels for a batch of " + std::to_string(n) +
                     " logits");
}
}  // namespace detail

/// Mean sparse softmax cross-entropy. If `dlogits` is given it receives the
/// gradient of the mean loss (resized to the logits' shape).
template <class T>
T softmax_cross_entropy(const Tensor<T>& logits, const std::vector<std::int32_t>& labels,
                        Tensor<T>* dlogits = nullptr) {
  detail::check_logits(logits, labels.size());
  const std::size_t n = logits.shape()[0], k = logits.size() / n;
  if (dlogits && dlogits->shape() != logits.shape()) dlogits->resize(logits.shape());
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const T* z = logits.data() + i * k;
    const std::int32_t y = labels[i];
    if (y < 0 || std::size_t(y) >= k)
      throw DataError("label " + std::to_string(y) + " of example " + std::to_string(i) + " is outside [0, " +
                      std::to_string(k) + ")");
    double mx = double(z[0]);
    for (std::size_t j = 1; j < k; ++j) mx = std::max(mx, double(z[j]));
    double sum = 0;
    for (std::size_t j = 0; j < k; ++j) sum += std::exp(double(z[j]) - mx);
    const double lse = mx + std::log(sum);
    total += lse - double(z[y]);
    if (dlogits) {
      T* g = dlogits->data() + i * k;
      for (std::size_t j = 0; j < k; ++j)
        g[j] = T((std::exp(double(z[j]) - lse) - (std::size_t(y) == j ? 1.0 : 0.0)) / double(n));
    }
  }
  return T(total / double(n));
}

/// Index of the largest logit per example.
template <class T>
std::vector<std::int32_t> argmax(const Tensor<T>& logits) {
  const std::size_t n = logits.shape()[0], k = logits.size() / n;
  std::vector<std::int32_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const T* z = logits.data() + i * k;
    std::size_t best = 0;
    for (std::size_t j = 1; j < k; ++j)
      if (z[j] > z[best]) best = j;
    out[i] = std::int32_t(best);
  }
  return out;
}

/// Row-wise softmax probabilities, shape (n, k, 1, 1) like the logits.
template <class T>
Tensor<T> softmax(const Tensor<T>& logits) {
  Tensor<T> p(logits.shape());
  const std::size_t n = logits.shape()[0], k = logits.size() / n;
  for (std::size_t i = 0; i < n; ++i) {
    const T* z = logits.data() + i * k;
    T* q = p.data() + i * k;
    double mx = double(z[0]);
    for (std::size_t j = 1; j < k; ++j) mx = std::max(mx, double(z[j]));
    double sum = 0;
    for (std::size_t j = 0; j < k; ++j) sum += std::exp(double(z[j]) - mx);
    for (std::size_t j = 0; j < k; ++j) q[j] = T(std::exp(double(z[j]) - mx) / sum);
  }
  return p;
}

/// tf.nn.in_top_k(logits, labels, 1): true where no class has a strictly
/// larger logit than the label's (ties count as hits, as in TF; a non-finite
/// logit is a miss).
template <class T>
std::vector<bool> in_top_1(const Tensor<T>& logits, const std::vector<std::int32_t>& labels) {
  detail::check_logits(logits, labels.size());
  const std::size_t n = logits.shape()[0], k = logits.size() / n;
  std::vector<bool> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const T* z = logits.data() + i * k;
    const std::int32_t y = labels[i];
    bool top = y >= 0 && std::size_t(y) < k && std::isfinite(double(z[y]));
    for (std::size_t j = 0; top && j < k; ++j)
      if (!std::isfinite(double(z[j])) || z[j] > z[y]) top = false;
    out[i] = top;
  }
  return out;
}

/// Number of examples whose label is the top-1 prediction.
template <class T>
std::size_t count_correct(const Tensor<T>& logits, const std::vector<std::int32_t>& labels) {
  std::size_t c = 0;
  for (bool b : in_top_1(logits, labels)) c += b;
  return c;
}

}  // namespace cifarnet
