// cifarnet/backend/reference/pool2d.hpp — max and average pooling with TF's
// SAME semantics: padded positions never win a max and are excluded from the
// average's divisor. Max backward routes the gradient to the first maximum in
// window order.
#pragma once

#include <cstring>
#include <limits>

#include "cifarnet/backend/reference/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct Pool2d<backend::Reference, T> {
  using Dev = Device<backend::Reference>;

  void forward(Dev&, const ConvGeom& g, PoolKind kind, bool /*training*/, const T* x, T* y) {
    const backend::ref::Layout X{g.fmt, g.ic, g.ih, g.iw}, Y{g.fmt, g.ic, g.oh, g.ow};
    for (std::size_t n = 0; n < g.n; ++n)
      for (std::size_t c = 0; c < g.ic; ++c)
        for (std::size_t oy = 0; oy < g.oh; ++oy)
          for (std::size_t ox = 0; ox < g.ow; ++ox) {
            T best = -std::numeric_limits<T>::infinity();
            T sum = 0;
            std::size_t count = 0;
            window(g, oy, ox, [&](std::size_t iy, std::size_t ix) {
              const T v = x[X(n, c, iy, ix)];
              if (v > best) best = v;
              sum += v;
              ++count;
            });
            y[Y(n, c, oy, ox)] = kind == PoolKind::Max ? best : sum / T(count);
          }
  }

  void backward(Dev&, const ConvGeom& g, PoolKind kind, const T* x, const T* y, const T* dy, T* dx) {
    const backend::ref::Layout X{g.fmt, g.ic, g.ih, g.iw}, Y{g.fmt, g.ic, g.oh, g.ow};
    std::memset(static_cast<void*>(dx), 0, sizeof(T) * g.n * g.ic * g.ih * g.iw);
    for (std::size_t n = 0; n < g.n; ++n)
      for (std::size_t c = 0; c < g.ic; ++c)
        for (std::size_t oy = 0; oy < g.oh; ++oy)
          for (std::size_t ox = 0; ox < g.ow; ++ox) {
            const T d = dy[Y(n, c, oy, ox)];
            if (kind == PoolKind::Max) {
              const T best = y[Y(n, c, oy, ox)];
              bool done = false;
              window(g, oy, ox, [&](std::size_t iy, std::size_t ix) {
                if (!done && x[X(n, c, iy, ix)] == best) {
                  dx[X(n, c, iy, ix)] += d;
                  done = true;
                }
              });
            } else {
              std::size_t count = 0;
              window(g, oy, ox, [&](std::size_t, std::size_t) { ++count; });
              window(g, oy, ox, [&](std::size_t iy, std::size_t ix) { dx[X(n, c, iy, ix)] += d / T(count); });
            }
          }
  }

 private:
  template <class F>
  static void window(const ConvGeom& g, std::size_t oy, std::size_t ox, F&& f) {
    for (std::size_t ky = 0; ky < g.kh; ++ky) {
      const long iy = long(oy * g.sh + ky) - long(g.pt);
      if (iy < 0 || iy >= long(g.ih)) continue;
      for (std::size_t kx = 0; kx < g.kw; ++kx) {
        const long ix = long(ox * g.sw + kx) - long(g.pl);
        if (ix < 0 || ix >= long(g.iw)) continue;
        f(std::size_t(iy), std::size_t(ix));
      }
    }
  }
};

}  // namespace ops
}  // namespace cifarnet
