// cifarnet/backend/host/classify.hpp — the softmax cross-entropy loss and
// the predictions on logits, as host loops shared by the CPU backends (and by
// the CUDA backend's host-side predictions). Logits are n rows of k values,
// row-major. Every sum is accumulated in double, with the log-sum-exp shift
// (stable for large logits).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/pending.hpp"

namespace cifarnet::backend::host {

/// Throws DataError for the first label outside [0, k).
inline void check_labels(std::size_t n, std::size_t k, const std::int32_t* labels) {
  for (std::size_t i = 0; i < n; ++i)
    if (labels[i] < 0 || std::size_t(labels[i]) >= k)
      throw DataError("label " + std::to_string(labels[i]) + " of example " + std::to_string(i) +
                      " is outside [0, " + std::to_string(k) + ")");
}

/// log Σ_j exp(z[j]) over one row of k logits, in double, shifted by the
/// row's largest value (stable for large logits).
template <class T>
double log_sum_exp(const T* z, std::size_t k) {
  double mx = double(z[0]);
  for (std::size_t j = 1; j < k; ++j) mx = std::max(mx, double(z[j]));
  double sum = 0;
  for (std::size_t j = 0; j < k; ++j) sum += std::exp(double(z[j]) - mx);
  return mx + std::log(sum);
}

/// Mean sparse softmax cross-entropy over n rows; dz (if not null) receives
/// d(mean loss)/dz = (softmax − onehot) / n.
template <class T>
double softmax_cross_entropy(std::size_t n, std::size_t k, const T* logits, const std::int32_t* labels,
                             T* dz) {
  if (n == 0 || k == 0) throw ShapeError("softmax cross-entropy of empty logits");
  check_labels(n, k, labels);
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const T* z = logits + i * k;
    const std::size_t y = std::size_t(labels[i]);
    const double lse = log_sum_exp(z, k);
    total += lse - double(z[y]);
    if (dz)
      for (std::size_t j = 0; j < k; ++j)
        dz[i * k + j] = T((std::exp(double(z[j]) - lse) - (y == j ? 1.0 : 0.0)) / double(n));
  }
  return total / double(n);
}

/// Row-wise softmax probabilities.
template <class T>
void softmax(std::size_t n, std::size_t k, const T* logits, T* p) {
  for (std::size_t i = 0; i < n; ++i) {
    const T* z = logits + i * k;
    double mx = double(z[0]);
    for (std::size_t j = 1; j < k; ++j) mx = std::max(mx, double(z[j]));
    double sum = 0;
    for (std::size_t j = 0; j < k; ++j) sum += std::exp(double(z[j]) - mx);
    for (std::size_t j = 0; j < k; ++j) p[i * k + j] = T(std::exp(double(z[j]) - mx) / sum);
  }
}

/// Index of each row's largest logit (the first one on ties).
template <class T>
void argmax(std::size_t n, std::size_t k, const T* logits, std::int32_t* out) {
  for (std::size_t i = 0; i < n; ++i) {
    const T* z = logits + i * k;
    std::size_t best = 0;
    for (std::size_t j = 1; j < k; ++j)
      if (z[j] > z[best]) best = j;
    out[i] = std::int32_t(best);
  }
}

/// tf.nn.in_top_k(logits, labels, 1): 1 where no class has a strictly larger
/// logit than the label's (ties count as hits, as in TF); a non-finite logit
/// or a label outside [0, k) is a miss.
template <class T>
void in_top1(std::size_t n, std::size_t k, const T* logits, const std::int32_t* labels, std::uint8_t* hits) {
  for (std::size_t i = 0; i < n; ++i) {
    const T* z = logits + i * k;
    const std::int32_t y = labels[i];
    bool top = y >= 0 && std::size_t(y) < k && std::isfinite(double(z[y]));
    for (std::size_t j = 0; top && j < k; ++j)
      if (!std::isfinite(double(z[j])) || z[j] > z[y]) top = false;
    hits[i] = top ? 1 : 0;
  }
}

}  // namespace cifarnet::backend::host

namespace cifarnet::backend::host {

/// ops::SoftmaxCrossEntropy as host loops (any device type: host memory).
template <class T>
struct SoftmaxCrossEntropyOp {
  template <class Dev>
  double loss(Dev&, std::size_t n, std::size_t k, const T* z, const std::int32_t* labels, T* dz) {
    return softmax_cross_entropy(n, k, z, labels, dz);
  }
  /// loss(), as a Pending (ready: the host has it; core/pending.hpp).
  template <class Dev>
  Pending loss_deferred(Dev& dev, std::size_t n, std::size_t k, const T* z, const std::int32_t* labels,
                        T* dz) {
    return Pending::ready(loss(dev, n, k, z, labels, dz));
  }
  template <class Dev>
  void softmax(Dev&, std::size_t n, std::size_t k, const T* z, T* p) {
    host::softmax(n, k, z, p);
  }
  template <class Dev>
  void argmax(Dev&, std::size_t n, std::size_t k, const T* z, std::int32_t* out) {
    host::argmax(n, k, z, out);
  }
  template <class Dev>
  void in_top1(Dev&, std::size_t n, std::size_t k, const T* z, const std::int32_t* labels,
               std::uint8_t* hits) {
    host::in_top1(n, k, z, labels, hits);
  }
};

}  // namespace cifarnet::backend::host
