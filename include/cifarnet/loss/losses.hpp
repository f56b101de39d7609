// cifarnet/loss/losses.hpp — losses and predictions on logits.
//
// Logits are (n, k, 1, 1) tensors (the output of a Dense head) in either
// format; since h = w = 1 the memory is (n, k) row-major either way.
//  - softmax_cross_entropy: mean sparse softmax cross-entropy, computed with
//    the log-sum-exp shift (stable for large logits); optionally writes
//    d(loss)/d(logits) = (softmax − onehot) / n.
//  - mean_squared_error: tf.losses.mean_squared_error's mean of (p − y)²
//    over every element (regression); optionally writes d(loss)/d(p) =
//    2 (p − y) / size.
//  - argmax, softmax, in_top_k(1) and accuracy for predictions.
// (Weight decay is an optimizer stage: optim::WeightDecay, optim/weight_decay.hpp.)
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cifarnet/backend/host/classify.hpp"
#include "cifarnet/backend/host/regression.hpp"
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
/// gradient of the mean loss (resized to the logits' shape). Host memory;
/// the Trainer runs the backend's ops::SoftmaxCrossEntropy instead.
template <class T>
T softmax_cross_entropy(const Tensor<T>& logits, const std::vector<std::int32_t>& labels,
                        Tensor<T>* dlogits = nullptr) {
  detail::check_logits(logits, labels.size());
  const std::size_t n = logits.shape()[0], k = logits.size() / n;
  if (dlogits && dlogits->shape() != logits.shape()) dlogits->resize(logits.shape());
  return T(backend::host::softmax_cross_entropy(n, k, logits.data(), labels.data(),
                                                dlogits ? dlogits->data() : nullptr));
}

/// tf.losses.mean_squared_error(labels = targets, predictions) with unit
/// weights: the mean of (p − y)² over every element, summed in double. If
/// `dpredictions` is given it receives the gradient of that mean, 2 (p − y) /
/// size (resized to the predictions' shape). ShapeError unless both hold the
/// same number of elements (at least one). Host memory.
template <class T>
T mean_squared_error(const Tensor<T>& predictions, const Tensor<T>& targets,
                     Tensor<T>* dpredictions = nullptr) {
  const std::size_t n = predictions.size();
  if (n == 0 || targets.size() != n)
    throw ShapeError("mean_squared_error: " + std::to_string(n) + " predictions against " +
                     std::to_string(targets.size()) + " targets (need the same number, at least one)");
  if (dpredictions && dpredictions->shape() != predictions.shape()) dpredictions->resize(predictions.shape());
  return T(backend::host::mean_squared_error(n, predictions.data(), targets.data(),
                                             dpredictions ? dpredictions->data() : nullptr));
}

/// Index of the largest logit per example.
template <class T>
std::vector<std::int32_t> argmax(const Tensor<T>& logits) {
  const std::size_t n = logits.shape()[0], k = logits.size() / n;
  std::vector<std::int32_t> out(n);
  backend::host::argmax(n, k, logits.data(), out.data());
  return out;
}

/// Row-wise softmax probabilities, shape (n, k, 1, 1) like the logits.
template <class T>
Tensor<T> softmax(const Tensor<T>& logits) {
  Tensor<T> p(logits.shape());
  const std::size_t n = logits.shape()[0], k = logits.size() / n;
  backend::host::softmax(n, k, logits.data(), p.data());
  return p;
}

/// tf.nn.in_top_k(logits, labels, 1): true where no class has a strictly
/// larger logit than the label's (ties count as hits, as in TF; a non-finite
/// logit is a miss).
template <class T>
std::vector<bool> in_top_1(const Tensor<T>& logits, const std::vector<std::int32_t>& labels) {
  detail::check_logits(logits, labels.size());
  const std::size_t n = logits.shape()[0], k = logits.size() / n;
  std::vector<std::uint8_t> hits(n);
  backend::host::in_top1(n, k, logits.data(), labels.data(), hits.data());
  return std::vector<bool>(hits.begin(), hits.end());
}

/// Number of examples whose label is the top-1 prediction.
template <class T>
std::size_t count_correct(const Tensor<T>& logits, const std::vector<std::int32_t>& labels) {
  std::size_t c = 0;
  for (bool b : in_top_1(logits, labels)) c += b;
  return c;
}

}  // namespace cifarnet
