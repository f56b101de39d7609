// cifarnet/backend/reference/elementwise.hpp — the reference backend's
// parameter-free ops outside convolution and normalization: Eltwise (the
// residual sum, with its ReLU, and the affine rescale), ChannelPad,
// GlobalAvgPool (sums in double), and the host ops shared with oneDNN:
// SoftmaxCrossEntropy, BnStats and SyncBatchNorm (backend/host/).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cifarnet/backend/host/bn_stats.hpp"
#include "cifarnet/backend/host/bytes.hpp"
#include "cifarnet/backend/host/channel_pad.hpp"
#include "cifarnet/backend/host/classify.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct Eltwise<backend::Reference, T> {
  using Dev = Device<backend::Reference>;
  void add(Dev&, std::size_t n, const T* a, const T* b, T* y, bool relu) {
    for (std::size_t i = 0; i < n; ++i) {
      const T v = a[i] + b[i];
      y[i] = relu && v < T(0) ? T(0) : v;  // NaN propagates through the ReLU
    }
  }
  void add_masked(Dev&, std::size_t n, const T* a, const T* b, const T* m, T* y) {
    for (std::size_t i = 0; i < n; ++i) y[i] = m[i] > T(0) ? a[i] + b[i] : T(0);
  }
  void affine(Dev&, std::size_t n, const T* x, T a, T b, T* y) {
    for (std::size_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
  }
  void from_bytes(Dev&, std::size_t count, std::size_t c, std::size_t h, std::size_t w, DataFormat fmt,
                  const std::uint8_t* src, T* dst) {
    backend::host::bytes_to_float(count, c, h, w, fmt, src, dst);
  }
};

template <class T>
struct ChannelPad<backend::Reference, T> : backend::host::ChannelPadOp<T> {};

template <class T>
struct GlobalAvgPool<backend::Reference, T> {
  using Dev = Device<backend::Reference>;
  void forward(Dev&, const ChannelGeom& g, const T* x, T* y) {
    const std::size_t hw = g.h * g.w, C = g.c;
    for (std::size_t n = 0; n < g.n; ++n)
      for (std::size_t c = 0; c < C; ++c) {
        double acc = 0;
        for (std::size_t i = 0; i < hw; ++i)
          acc += double(x[offset(g.shape(), g.fmt, n, c, i / g.w, i % g.w)]);
        y[n * C + c] = T(acc / double(hw));
      }
  }
  void backward(Dev&, const ChannelGeom& g, const T* dy, T* dx) {
    const std::size_t hw = g.h * g.w, C = g.c;
    for (std::size_t n = 0; n < g.n; ++n)
      for (std::size_t c = 0; c < C; ++c)
        for (std::size_t i = 0; i < hw; ++i)
          dx[offset(g.shape(), g.fmt, n, c, i / g.w, i % g.w)] = T(double(dy[n * C + c]) / double(hw));
  }
};

template <class T>
struct SoftmaxCrossEntropy<backend::Reference, T> : backend::host::SoftmaxCrossEntropyOp<T> {};
template <class T>
struct BnStats<backend::Reference, T> : backend::host::BnStatsOp<T> {};
template <class T>
struct SyncBatchNorm<backend::Reference, T> : backend::host::SyncBatchNormOp<T> {};

}  // namespace ops
}  // namespace cifarnet
