// cifarnet/backend/onednn/avg_pool_kernels.hpp — average pooling over NHWC
// float data with windows that do not overlap and no padding (the geometries
// max_pool::handles takes), in the project's own OpenMP loops, used by the
// oneDNN backend's Pool2d: ResNet's 2×2/2 shortcut pools.
//
// Why not oneDNN's primitive there: oneDNN 2.6's NHWC average pooling ran
// far below the memory rate on ResNet-20's 16- and 32-channel maps (on a
// 2-core AMX Xeon, batch 128, its backward took about 1 ms over the
// 128×32×32×16 dx, near 10 GB/s; the ResNet-20 step's pools went from 0.67 +
// 1.26 to 0.56 + 1.01 ms with these loops, docs/BENCHMARKS.md). Without
// overlap every input element belongs to at most one window, so the backward
// writes each element of dx once (dy / count, or 0 outside every window),
// with no zeroing pass; vectorized over channels.
//
// Semantics as the reference backend's, in float: a window's values summed
// in row-major order, then divided by the window's size (no padding here, so
// the count is kh·kw); the backward spreads dy / count.
#pragma once

#include <omp.h>

#include <cstddef>
#include <cstdint>

#include "cifarnet/backend/host/bf16.hpp"
#include "cifarnet/backend/onednn/max_pool_kernels.hpp"
#include "cifarnet/ops/geometry.hpp"

namespace cifarnet {
namespace backend {
namespace onednn {
namespace avg_pool {

/// Whether these kernels handle g (max_pool::handles' geometries).
inline bool handles(const ConvGeom& g) { return max_pool::handles(g); }

namespace detail {
// The loops below with the channel count C a constant (CC > 0:
// max_pool::with_channels) or read from g (CC == 0: any other). A constant C lets
// the compiler keep a pixel's sums in registers and drop the remainder
// loops: ResNet-20's stage-2 shortcut pool (batch 128, 16 channels at
// 32x32, bf16 in) took 0.17 instead of 0.26 ms forward and 0.27 instead of
// 0.44 ms backward on a 2-core AMX Xeon (docs/BENCHMARKS.md, 2026-12-04
// 20:24). The same sums in the same order: the same bits.
template <std::size_t CC, class X>
void forward(const ConvGeom& g, const X* x, float* y, std::size_t ys) {
  const std::size_t C = CC ? CC : g.ic, YS = ys ? ys : C;
  const float count = float(g.kh * g.kw);
  const std::ptrdiff_t rows = std::ptrdiff_t(g.n * g.oh);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t r = 0; r < rows; ++r) {
    const std::size_t n = std::size_t(r) / g.oh, oy = std::size_t(r) % g.oh;
    for (std::size_t ox = 0; ox < g.ow; ++ox) {
      float* __restrict yo = y + (std::size_t(r) * g.ow + ox) * YS;
      // the sums in registers where C is a constant, else in y itself
      float stack[CC ? CC : 1];
      float* const acc = CC ? stack : yo;
      for (std::size_t c = 0; c < C; ++c) acc[c] = 0.f;
      for (std::size_t ky = 0; ky < g.kh; ++ky)
        for (std::size_t kx = 0; kx < g.kw; ++kx) {
          const X* __restrict xi = x + (((n * g.ih) + oy * g.sh + ky) * g.iw + ox * g.sw + kx) * C;
#pragma omp simd
          for (std::size_t c = 0; c < C; ++c) acc[c] += host::widen(xi[c]);
        }
#pragma omp simd
      for (std::size_t c = 0; c < C; ++c) yo[c] = acc[c] / count;
    }
  }
}
template <std::size_t CC>
void backward(const ConvGeom& g, const float* dy, float* dx, std::size_t ds) {
  const std::size_t C = CC ? CC : g.ic, DS = ds ? ds : C;
  const float count = float(g.kh * g.kw);
  max_pool::each_input_pixel(g, dx, [&](float* __restrict d, std::size_t o, std::size_t) {
    if (o == max_pool::kOutside) {
      for (std::size_t c = 0; c < C; ++c) d[c] = 0.f;
      return;
    }
    const float* __restrict dyo = dy + o / C * DS;
#pragma omp simd
    for (std::size_t c = 0; c < C; ++c) d[c] = dyo[c] / count;
  });
}
}  // namespace detail

/// y = the mean of each window. Parallel over output rows. x is float or
/// bfloat16 bits (widened exactly: a residual stream kept in bf16). With
/// `ys` (> 0), y's pixels are `ys` floats apart and y points at the first
/// pixel's first channel written (a channel-padded output: ChannelPad's,
/// written in place, ys its channel count); the other channels untouched.
template <class X>
void forward(const ConvGeom& g, const X* x, float* y, std::size_t ys = 0) {
  max_pool::with_channels(g.ic, [&](auto cc) { detail::forward<decltype(cc)::value>(g, x, y, ys); });
}

/// dx from dy: each input element in a window gets that window's dy / count,
/// 0 outside every window; dx is written once per element. Parallel over
/// input rows. With `ds` (> 0), dy's pixels are `ds` floats apart (the
/// gradient of a channel-padded output, forward's `ys`; dy at the first
/// pixel's first channel read).
inline void backward(const ConvGeom& g, const float* dy, float* dx, std::size_t ds = 0) {
  max_pool::with_channels(g.ic, [&](auto cc) { detail::backward<decltype(cc)::value>(g, dy, dx, ds); });
}

}  // namespace avg_pool
}  // namespace onednn
}  // namespace backend
}  // namespace cifarnet
