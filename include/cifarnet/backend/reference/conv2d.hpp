// cifarnet/backend/reference/conv2d.hpp — direct-loop convolution, the oracle
// for every other backend. Weights HWIO; any scalar type.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cifarnet/backend/reference/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct Conv2d<backend::Reference, T> {
  using Dev = Device<backend::Reference>;

  void forward(Dev&, const ConvGeom& g, const T* x, const T* w, const T* b, T* y) {
    const backend::ref::Layout X{g.fmt, g.ic, g.ih, g.iw}, Y{g.fmt, g.oc, g.oh, g.ow};
#pragma omp parallel for collapse(2) schedule(static)
    for (long n = 0; n < long(g.n); ++n)
      for (long oy = 0; oy < long(g.oh); ++oy)
        for (std::size_t ox = 0; ox < g.ow; ++ox)
          for (std::size_t oc = 0; oc < g.oc; ++oc) {
            T acc = b ? b[oc] : T(0);
            for (std::size_t ky = 0; ky < g.kh; ++ky) {
              const long iy = oy * long(g.sh) + long(ky) - long(g.pt);
              if (iy < 0 || iy >= long(g.ih)) continue;
              for (std::size_t kx = 0; kx < g.kw; ++kx) {
                const long ix = long(ox * g.sw + kx) - long(g.pl);
                if (ix < 0 || ix >= long(g.iw)) continue;
                const T* wp = w + (ky * g.kw + kx) * g.ic * g.oc + oc;
                for (std::size_t ic = 0; ic < g.ic; ++ic)
                  acc += x[X(std::size_t(n), ic, std::size_t(iy), std::size_t(ix))] * wp[ic * g.oc];
              }
            }
            y[Y(std::size_t(n), oc, std::size_t(oy), ox)] = acc;
          }
  }

  void backward_data(Dev&, const ConvGeom& g, const T* dy, const T* w, T* dx) {
    const backend::ref::Layout X{g.fmt, g.ic, g.ih, g.iw}, Y{g.fmt, g.oc, g.oh, g.ow};
    std::memset(static_cast<void*>(dx), 0, sizeof(T) * g.n * g.ic * g.ih * g.iw);
#pragma omp parallel for schedule(static)
    for (long n = 0; n < long(g.n); ++n)
      for (std::size_t oy = 0; oy < g.oh; ++oy)
        for (std::size_t ox = 0; ox < g.ow; ++ox)
          for (std::size_t ky = 0; ky < g.kh; ++ky) {
            const long iy = long(oy * g.sh + ky) - long(g.pt);
            if (iy < 0 || iy >= long(g.ih)) continue;
            for (std::size_t kx = 0; kx < g.kw; ++kx) {
              const long ix = long(ox * g.sw + kx) - long(g.pl);
              if (ix < 0 || ix >= long(g.iw)) continue;
              for (std::size_t ic = 0; ic < g.ic; ++ic) {
                const T* wp = w + ((ky * g.kw + kx) * g.ic + ic) * g.oc;
                T acc = 0;
                for (std::size_t oc = 0; oc < g.oc; ++oc) acc += dy[Y(std::size_t(n), oc, oy, ox)] * wp[oc];
                dx[X(std::size_t(n), ic, std::size_t(iy), std::size_t(ix))] += acc;
              }
            }
          }
  }

  void backward_weights(Dev&, const ConvGeom& g, const T* x, const T* dy, T* dw, T* db) {
    const backend::ref::Layout X{g.fmt, g.ic, g.ih, g.iw}, Y{g.fmt, g.oc, g.oh, g.ow};
#pragma omp parallel for collapse(2) schedule(static)
    for (long ky = 0; ky < long(g.kh); ++ky)
      for (long kx = 0; kx < long(g.kw); ++kx)
        for (std::size_t ic = 0; ic < g.ic; ++ic)
          for (std::size_t oc = 0; oc < g.oc; ++oc) {
            T acc = 0;
            for (std::size_t n = 0; n < g.n; ++n)
              for (std::size_t oy = 0; oy < g.oh; ++oy) {
                const long iy = long(oy * g.sh) + ky - long(g.pt);
                if (iy < 0 || iy >= long(g.ih)) continue;
                for (std::size_t ox = 0; ox < g.ow; ++ox) {
                  const long ix = long(ox * g.sw) + kx - long(g.pl);
                  if (ix < 0 || ix >= long(g.iw)) continue;
                  acc += x[X(n, ic, std::size_t(iy), std::size_t(ix))] * dy[Y(n, oc, oy, ox)];
                }
              }
            dw[((std::size_t(ky) * g.kw + std::size_t(kx)) * g.ic + ic) * g.oc + oc] = acc;
          }
    if (db) {
      for (std::size_t oc = 0; oc < g.oc; ++oc) db[oc] = 0;
      for (std::size_t n = 0; n < g.n; ++n)
        for (std::size_t oy = 0; oy < g.oh; ++oy)
          for (std::size_t ox = 0; ox < g.ow; ++ox)
            for (std::size_t oc = 0; oc < g.oc; ++oc) db[oc] += dy[Y(n, oc, oy, ox)];
    }
  }
};

/// The plan executor's inference convolution: the reference convolution,
/// then the sum and the ReLU, in T (float activations only).
template <class T>
struct ConvEpilogue<backend::Reference, T> {
  static constexpr bool supported = true;
  static bool bf16_storage() { return false; }
  static std::string own_kernel_why_not(const ConvGeom&, bool) {
    return "the reference backend has no own inference kernels";
  }
  static std::string winograd_why_not(const ConvGeom&, bool) {
    return "the reference backend has no own Winograd kernels";
  }
  void forward(Device<backend::Reference>& dev, const ConvGeom& g, const void* x, bool x_bf16, const T* w,
               const T* b, std::uint64_t, bool, const void* s, bool s_bf16, void* y, bool y_bf16, bool relu,
               bool own = false, bool winograd = false) {
    if (own || winograd)
      throw std::logic_error("ConvEpilogue: the reference backend has no own inference kernels");
    if (x_bf16 || y_bf16 || (s && s_bf16))
      throw ConfigError("ConvEpilogue: the reference backend has no bf16 activations");
    T* out = static_cast<T*>(y);
    const std::size_t n = g.n * g.oc * g.oh * g.ow;
    if (s) term_.assign(static_cast<const T*>(s), static_cast<const T*>(s) + n);
    conv_.forward(dev, g, static_cast<const T*>(x), w, b, out);
    for (std::size_t i = 0; i < n; ++i) {
      const T v = s ? out[i] + term_[i] : out[i];
      out[i] = relu && !(v > T(0)) && v == v ? T(0) : v;
    }
  }

 private:
  Conv2d<backend::Reference, T> conv_;
  std::vector<T> term_;
};

}  // namespace ops
}  // namespace cifarnet
