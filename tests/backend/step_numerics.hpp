// tests/backend/step_numerics.hpp — one training step of a CIFAR ResNet on a
// backend in float, against the same step in double on the reference
// backend (same initial weights, same batch): the error of the loss, the
// logits, every gradient and every BN moving statistic. Used by the
// training-size agreement test (test_step_numerics.cpp) and by the
// step_numerics program, which prints the table.
//
// Error of a tensor, relative to its largest exact element:
//   max    = max_i |g_i - g64_i| / max_i |g64_i|
//   median = median_i |g_i - g64_i| / max_i |g64_i|
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <cifarnet/backend/reference.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/core/rng.hpp>
#include <cifarnet/models/resnet.hpp>

namespace cifarnet {
namespace test {

/// The error of one tensor against its double counterpart.
struct TensorError {
  std::string name;
  std::size_t size = 0;
  double max = 0, median = 0;  ///< relative to max |exact|
  double scale = 0;            ///< max |exact|
};

template <class F, class D>
TensorError tensor_error(std::string name, const F* got, const D* exact, std::size_t n) {
  TensorError e;
  e.name = std::move(name);
  e.size = n;
  std::vector<double> diff(n);
  for (std::size_t i = 0; i < n; ++i) {
    e.scale = std::max(e.scale, std::abs(double(exact[i])));
    diff[i] = std::abs(double(got[i]) - double(exact[i]));
    if (std::isnan(diff[i])) diff[i] = INFINITY;
  }
  if (n == 0) return e;
  const double s = e.scale > 0 ? e.scale : 1.0;
  e.max = *std::max_element(diff.begin(), diff.end()) / s;
  std::nth_element(diff.begin(), diff.begin() + std::ptrdiff_t(n / 2), diff.end());
  e.median = diff[n / 2] / s;
  return e;
}

/// A batch in logical NCHW order: pixels 0..255 and labels.
struct StepBatch {
  std::size_t n = 0;
  std::vector<float> nchw;
  std::vector<std::int32_t> labels;
};

/// `n` images of random pixels in [0, 255) and random labels in [0, 10).
inline StepBatch random_step_batch(std::size_t n, std::uint64_t seed) {
  StepBatch b;
  b.n = n;
  Rng rng(seed);
  b.nchw.resize(n * 3 * 32 * 32);
  for (auto& v : b.nchw) v = float(rng.uniform(0, 255));
  for (std::size_t i = 0; i < n; ++i) b.labels.push_back(std::int32_t(rng.uniform_int(10)));
  return b;
}

template <class T>
Tensor<T> to_tensor(const StepBatch& b, DataFormat fmt) {
  const Shape s{b.n, 3, 32, 32};
  Tensor<T> t = make_tensor<T>(s, fmt);
  T* p = t.data();
  for (std::size_t i = 0; i < b.n; ++i)
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t h = 0; h < 32; ++h)
        for (std::size_t w = 0; w < 32; ++w)
          p[offset(s, fmt, i, c, h, w)] = T(b.nchw[offset(s, DataFormat::NCHW, i, c, h, w)]);
  return t;
}

/// What one step of the model under test got wrong, tensor by tensor.
struct StepErrors {
  TensorError loss, logits;
  std::vector<TensorError> grads;  ///< every trainable parameter's gradient, in model order
  std::vector<TensorError> state;  ///< every BN moving statistic after the step
};

/// One training step (forward in training mode, mean softmax cross-entropy,
/// backward) of ResNet-`depth` on backend B in float, once per layout in
/// `formats`, against the same step in double on the reference backend (run
/// once). Both sides start from the same float-representable weights.
template <class B>
std::vector<StepErrors> compare_resnet_step(int depth, const std::vector<DataFormat>& formats,
                                            const StepBatch& batch, std::uint64_t seed = 7) {
  const NetOptions opts = resnet_options(depth);
  Model<ResNetCifar<>, backend::Reference, double> ref({3, 32, 32}, DataFormat::NCHW, opts, seed);
  auto& R = ref.parameters();
  for (std::size_t j = 0; j < R.count(); ++j) {  // float-representable initial values
    double* v = R.value(j);
    for (std::size_t k = 0; k < R.info(j).size; ++k) v[k] = double(float(v[k]));
  }
  const std::vector<double> initial(R.values().data(), R.values().data() + R.values().size());
  const std::vector<double> initial_state(R.state().data(), R.state().data() + R.state().size());
  Tensor<double> dld;
  const Tensor<double>& ld = ref.forward(to_tensor<double>(batch, DataFormat::NCHW), Mode::Train);
  const double loss_d = softmax_cross_entropy(ld, batch.labels, &dld);
  ref.backward(dld);

  std::vector<StepErrors> out;
  for (DataFormat fmt : formats) {
    Model<ResNetCifar<>, B, float> net({3, 32, 32}, fmt, opts, seed);
    auto& P = net.parameters();
    for (std::size_t i = 0; i < P.count(); ++i) {
      const auto& info = P.info(i);
      const auto& rinfo = R.info(R.id(info.name));
      const double* src = (rinfo.trainable ? initial.data() : initial_state.data()) + rinfo.offset;
      float* dst = P.value(i);
      for (std::size_t k = 0; k < info.size; ++k) dst[k] = float(src[k]);
    }
    StepErrors e;
    Tensor<float> dlf;
    const Tensor<float>& lf = net.forward(to_tensor<float>(batch, fmt), Mode::Train);
    const float loss_f = softmax_cross_entropy(lf, batch.labels, &dlf);
    e.loss = tensor_error("loss", &loss_f, &loss_d, 1);
    e.logits = tensor_error("logits", lf.data(), ld.data(), ld.size());  // [n, k, 1, 1] either way
    net.backward(dlf);
    for (std::size_t i = 0; i < P.count(); ++i) {
      const auto& info = P.info(i);
      const std::size_t j = R.id(info.name);
      if (info.trainable)
        e.grads.push_back(tensor_error(info.name, P.grad(i), R.grad(j), info.size));
      else
        e.state.push_back(tensor_error(info.name, P.value(i), R.value(j), info.size));
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace test
}  // namespace cifarnet
