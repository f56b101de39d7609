// cifarnet/backend/reference/batch_norm.hpp — batch normalization over
// (n, h, w) per channel with TF semantics: training normalizes with the batch
// mean and the biased batch variance; inference uses the given statistics.
// Sums are accumulated in double whatever T is.
#pragma once

#include <cmath>
#include <vector>

#include "cifarnet/backend/reference/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct BatchNorm<backend::Reference, T> {
  using Dev = Device<backend::Reference>;

  void forward_train(Dev&, const ChannelGeom& g, double eps, const T* x, const T* gamma, const T* beta, T* y,
                     T* mean, T* var) {
    const backend::ref::Layout L{g.fmt, g.c, g.h, g.w};
    const double m = double(g.n * g.h * g.w);
    for (std::size_t c = 0; c < g.c; ++c) {
      double s = 0;
      for_each_(g, L, c, [&](std::size_t i) { s += double(x[i]); });
      const double mu = s / m;
      double v = 0;
      for_each_(g, L, c, [&](std::size_t i) { v += (double(x[i]) - mu) * (double(x[i]) - mu); });
      v /= m;
      mean[c] = T(mu);
      var[c] = T(v);
      const double inv = 1.0 / std::sqrt(v + eps);
      for_each_(g, L, c, [&](std::size_t i) {
        y[i] = T(double(gamma[c]) * (double(x[i]) - mu) * inv + double(beta[c]));
      });
    }
  }

  void forward_infer(Dev&, const ChannelGeom& g, double eps, const T* x, const T* gamma, const T* beta,
                     const T* mean, const T* var, T* y) {
    const backend::ref::Layout L{g.fmt, g.c, g.h, g.w};
    for (std::size_t c = 0; c < g.c; ++c) {
      const double inv = 1.0 / std::sqrt(double(var[c]) + eps);
      for_each_(g, L, c, [&](std::size_t i) {
        y[i] = T(double(gamma[c]) * (double(x[i]) - double(mean[c])) * inv + double(beta[c]));
      });
    }
  }

  void backward(Dev&, const ChannelGeom& g, double eps, const T* x, const T* dy, const T* gamma,
                const T* mean, const T* var, T* dx, T* dgamma, T* dbeta) {
    const backend::ref::Layout L{g.fmt, g.c, g.h, g.w};
    const double m = double(g.n * g.h * g.w);
    for (std::size_t c = 0; c < g.c; ++c) {
      const double mu = double(mean[c]), inv = 1.0 / std::sqrt(double(var[c]) + eps);
      double sdy = 0, sdyx = 0;
      for_each_(g, L, c, [&](std::size_t i) {
        sdy += double(dy[i]);
        sdyx += double(dy[i]) * (double(x[i]) - mu) * inv;
      });
      dgamma[c] = T(sdyx);
      dbeta[c] = T(sdy);
      const double k = double(gamma[c]) * inv / m;
      for_each_(g, L, c, [&](std::size_t i) {
        const double xhat = (double(x[i]) - mu) * inv;
        dx[i] = T(k * (m * double(dy[i]) - sdy - xhat * sdyx));
      });
    }
  }

 private:
  template <class F>
  static void for_each_(const ChannelGeom& g, const backend::ref::Layout& L, std::size_t c, F&& f) {
    for (std::size_t n = 0; n < g.n; ++n)
      for (std::size_t y = 0; y < g.h; ++y)
        for (std::size_t x = 0; x < g.w; ++x) f(L(n, c, y, x));
  }
};

}  // namespace ops
}  // namespace cifarnet
