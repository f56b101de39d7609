// cifarnet/backend/reference/lrn.hpp — local response normalization across
// channels in TensorFlow's form: y_c = x_c / d_c^beta with
// d_c = bias + alpha * sum_{|j-c| <= r} x_j^2 (alpha is NOT divided by the
// window size, unlike Caffe and PyTorch).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "cifarnet/backend/reference/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct Lrn<backend::Reference, T> {
  using Dev = Device<backend::Reference>;

  void forward(Dev&, const ChannelGeom& g, const LrnParams& p, bool /*training*/, const T* x, T* y) {
    const backend::ref::Layout L{g.fmt, g.c, g.h, g.w};
    each_pixel(g, [&](std::size_t n, std::size_t yy, std::size_t xx) {
      for (std::size_t c = 0; c < g.c; ++c) {
        const double d = denom(g, L, p, x, n, c, yy, xx);
        y[L(n, c, yy, xx)] = T(double(x[L(n, c, yy, xx)]) * std::pow(d, -p.beta));
      }
    });
  }

  void backward(Dev&, const ChannelGeom& g, const LrnParams& p, const T* x, const T* /*y*/, const T* dy,
                T* dx) {
    const backend::ref::Layout L{g.fmt, g.c, g.h, g.w};
    const long r = long(p.depth_radius);
    std::vector<double> d(g.c);
    each_pixel(g, [&](std::size_t n, std::size_t yy, std::size_t xx) {
      for (std::size_t c = 0; c < g.c; ++c) d[c] = denom(g, L, p, x, n, c, yy, xx);
      for (std::size_t j = 0; j < g.c; ++j) {
        double acc = double(dy[L(n, j, yy, xx)]) * std::pow(d[j], -p.beta);
        double s = 0;
        const long lo = std::max(0L, long(j) - r), hi = std::min(long(g.c) - 1, long(j) + r);
        for (long c = lo; c <= hi; ++c)
          s += double(dy[L(n, std::size_t(c), yy, xx)]) * double(x[L(n, std::size_t(c), yy, xx)]) *
               std::pow(d[std::size_t(c)], -p.beta - 1.0);
        acc -= 2.0 * p.alpha * p.beta * double(x[L(n, j, yy, xx)]) * s;
        dx[L(n, j, yy, xx)] = T(acc);
      }
    });
  }

 private:
  template <class F>
  static void each_pixel(const ChannelGeom& g, F&& f) {
    for (std::size_t n = 0; n < g.n; ++n)
      for (std::size_t y = 0; y < g.h; ++y)
        for (std::size_t x = 0; x < g.w; ++x) f(n, y, x);
  }
  static double denom(const ChannelGeom& g, const backend::ref::Layout& L, const LrnParams& p, const T* x,
                      std::size_t n, std::size_t c, std::size_t y, std::size_t xx) {
    const long r = long(p.depth_radius);
    const long lo = std::max(0L, long(c) - r), hi = std::min(long(g.c) - 1, long(c) + r);
    double s = 0;
    for (long j = lo; j <= hi; ++j) {
      const double v = double(x[L(n, std::size_t(j), y, xx)]);
      s += v * v;
    }
    return p.bias + p.alpha * s;
  }
};

}  // namespace ops
}  // namespace cifarnet
