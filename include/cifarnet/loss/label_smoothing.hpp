// cifarnet/loss/label_smoothing.hpp — softmax cross-entropy with label
// smoothing and a choice of reduction, PyTorch's
// F.cross_entropy(logits, labels, label_smoothing=s, reduction='sum'|'mean').
//
// Each row's target is q = (1 − s)·onehot(label) + s/k over its k classes;
// the loss of a row is −Σ_j q_j·log softmax(z)_j and its gradient
// softmax(z) − q. Reduction::Sum adds the rows (the airbench recipe sums over
// its batch of 2,000), Reduction::Mean averages them (the gradient is then
// divided by n). With s = 0 and Mean this is softmax_cross_entropy
// (loss/losses.hpp). Host memory (the logits of a Dense head are small); the
// arithmetic is backend/host/label_smoothing.hpp, in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cifarnet/backend/host/label_smoothing.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/loss/losses.hpp"

namespace cifarnet {

/// How per-example losses combine into the batch loss.
enum class Reduction { Mean, Sum };

/// Options of the label-smoothed cross-entropy.
struct CrossEntropyOptions {
  /// s in [0, 1]: the target is (1 − s)·onehot + s/k (0: plain one-hot).
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::Mean;

  void validate() const {
    if (!std::isfinite(label_smoothing) || label_smoothing < 0.0 || label_smoothing > 1.0)
      throw ConfigError("CrossEntropyOptions: label_smoothing must be in [0, 1], got " +
                        std::to_string(label_smoothing));
  }
};

/// Softmax cross-entropy against label-smoothed targets, summed or averaged
/// over the batch. If `dlogits` is given it receives d(loss)/d(logits)
/// (resized to the logits' shape). Labels outside [0, k) are a DataError.
template <class T>
T softmax_cross_entropy(const Tensor<T>& logits, const std::vector<std::int32_t>& labels,
                        const CrossEntropyOptions& opts, Tensor<T>* dlogits = nullptr) {
  opts.validate();
  detail::check_logits(logits, labels.size());
  const std::size_t n = logits.shape()[0], k = logits.size() / n;
  if (dlogits && dlogits->shape() != logits.shape()) dlogits->resize(logits.shape());
  return T(backend::host::smoothed_softmax_cross_entropy(
      n, k, logits.data(), labels.data(), opts.label_smoothing, opts.reduction == Reduction::Mean,
      dlogits ? dlogits->data() : nullptr));
}

}  // namespace cifarnet
