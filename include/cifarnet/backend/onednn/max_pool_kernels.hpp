// cifarnet/backend/onednn/max_pool_kernels.hpp — max pooling over NHWC float
// data with windows that do not overlap (stride >= window) and no padding,
// in the project's own OpenMP loops, used by the oneDNN backend's Pool2d for
// those geometries (airbench's 2×2/2 and 3×3/3 pools).
//
// Why not oneDNN's primitive there: oneDNN 2.6's NHWC max pooling forward and
// backward ran at about 60 % of the memory rate of the batch norm passes on
// the same data (docs/BENCHMARKS.md, airbench profile); without overlap, each
// input element belongs to at most one window, so the backward writes every
// element of dx exactly once (the gradient at the window's argmax, 0 elsewhere)
// with no zeroing pass and no scattered accumulation, and the forward keeps
// the argmax as one byte per output value. Vectorized over channels.
//
// Semantics as the reference backend's: the first maximum of a window in
// row-major order wins (strict >, starting from -inf), so a NaN never wins
// and ties go to the earliest position.
#pragma once

#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "cifarnet/backend/host/bf16.hpp"
#include "cifarnet/ops/geometry.hpp"

namespace cifarnet {
namespace backend {
namespace onednn {
namespace max_pool {

/// Whether these kernels handle g: NHWC, no padding, stride >= window in both
/// axes, at most 255 window positions (the argmax is one byte).
inline bool handles(const ConvGeom& g) {
  return g.fmt == DataFormat::NHWC && g.pt == 0 && g.pb == 0 && g.pl == 0 && g.pr == 0 && g.sh >= g.kh &&
         g.sw >= g.kw && g.kh * g.kw <= 255 && g.oh > 0 && g.ow > 0 && (g.oh - 1) * g.sh + g.kh <= g.ih &&
         (g.ow - 1) * g.sw + g.kw <= g.iw;
}

/// y = max over each window; with `argmax`, the window position (ky kw + kx)
/// of each output's maximum. Parallel over output rows. x is float or
/// bfloat16 bits (a bf16 convolution's output, widened exactly: the max of
/// the widened values is the widened max). With x as bits, y may be null
/// and `y_bits` given: y written only as bfloat16 bits, each pixel's
/// maxima formed in a buffer first; they are values of x, so the bits are
/// exact (pool_bf16_output_to_bn).
template <class X>
inline void forward(const ConvGeom& g, const X* x, float* y, std::uint8_t* argmax,
                    std::uint16_t* y_bits = nullptr) {
  static_assert(std::is_same_v<X, float> || std::is_same_v<X, std::uint16_t>, "x: float or bf16 bits");
  if (!y && !(y_bits && std::is_same_v<X, std::uint16_t>))
    throw std::logic_error("max_pool::forward: y null without bf16 x and y_bits");
  const std::size_t C = g.ic;
  const std::ptrdiff_t rows = std::ptrdiff_t(g.n * g.oh);
#pragma omp parallel
  {
    std::vector<float> pixel(y ? 0 : C);  // y_bits alone: one pixel's maxima
#pragma omp for schedule(static)
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      const std::size_t n = std::size_t(r) / g.oh, oy = std::size_t(r) % g.oh;
      for (std::size_t ox = 0; ox < g.ow; ++ox) {
        const std::size_t o = (std::size_t(r) * g.ow + ox) * C;
        float* __restrict yo = y ? y + o : pixel.data();
        std::uint8_t* __restrict ao = argmax ? argmax + o : nullptr;
        for (std::size_t c = 0; c < C; ++c) yo[c] = -std::numeric_limits<float>::infinity();
        if (ao)
          for (std::size_t c = 0; c < C; ++c) ao[c] = 0;
        for (std::size_t ky = 0; ky < g.kh; ++ky)
          for (std::size_t kx = 0; kx < g.kw; ++kx) {
            const X* __restrict xi = x + (((n * g.ih) + oy * g.sh + ky) * g.iw + ox * g.sw + kx) * C;
            const auto k = std::uint8_t(ky * g.kw + kx);
            if (ao) {
#pragma omp simd
              for (std::size_t c = 0; c < C; ++c) {
                const float v = host::widen(xi[c]);
                const bool win = v > yo[c];
                yo[c] = win ? v : yo[c];
                ao[c] = win ? k : ao[c];
              }
            } else {
#pragma omp simd
              for (std::size_t c = 0; c < C; ++c) {
                const float v = host::widen(xi[c]);
                yo[c] = v > yo[c] ? v : yo[c];
              }
            }
          }
        if (!y) host::store_bf16(yo, y_bits + o, C);
      }
    }
  }
}

/// f(d, o, k) for each input pixel of g, in parallel over input rows: d its
/// C values in dx, o the offset of its window's output (kOutside when no
/// window covers it: f then zeroes d) and k its position in that window
/// (ky kw + kx). The backward passes of these kernels write dx through it.
inline constexpr std::size_t kOutside = ~std::size_t(0);
/// f(d, o, k) for each pixel of input row r (image r / ih, row r % ih), d
/// at dxr (the row's iw C values).
template <class F>
inline void input_row(const ConvGeom& g, std::size_t r, float* dxr, F&& f) {
  const std::size_t C = g.ic;
  const std::size_t n = r / g.ih, iy = r % g.ih;
  const std::size_t oy = iy / g.sh, ky = iy % g.sh;
  const bool row_in = oy < g.oh && ky < g.kh;
  for (std::size_t ix = 0; ix < g.iw; ++ix) {
    const std::size_t ox = ix / g.sw, kx = ix % g.sw;
    const bool in = row_in && ox < g.ow && kx < g.kw;
    f(dxr + ix * C, in ? ((n * g.oh + oy) * g.ow + ox) * C : kOutside, std::size_t(ky * g.kw + kx));
  }
}
template <class F>
inline void each_input_pixel(const ConvGeom& g, float* dx, F&& f) {
  const std::ptrdiff_t rows = std::ptrdiff_t(g.n * g.ih);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t r = 0; r < rows; ++r)
    input_row(g, std::size_t(r), dx + std::size_t(r) * g.iw * g.ic, f);
}

/// dx from dy: each input element gets dy of its window's output where it is
/// that window's argmax, 0 elsewhere (also outside every window). dx is
/// written once per element. Parallel over input rows.
// One input pixel's C values of dx (input_row's f for backward).
inline void route(std::size_t C, const std::uint8_t* argmax, const float* dy, float* __restrict d,
                  std::size_t o, std::size_t pos) {
  if (o == kOutside) {
    for (std::size_t c = 0; c < C; ++c) d[c] = 0.f;
    return;
  }
  const float* __restrict dyo = dy + o;
  const std::uint8_t* __restrict ao = argmax + o;
  const auto k = std::uint8_t(pos);
#pragma omp simd
  for (std::size_t c = 0; c < C; ++c) d[c] = ao[c] == k ? dyo[c] : 0.f;
}
inline void backward(const ConvGeom& g, const std::uint8_t* argmax, const float* dy, float* dx) {
  each_input_pixel(g, dx,
                   [&](float* d, std::size_t o, std::size_t pos) { route(g.ic, argmax, dy, d, o, pos); });
}
/// backward() with dx written as bfloat16 bits (host::store_bf16 of its
/// float dx, a row at a time from a float row in cache): the dy of a bf16
/// convolution before the pool, rounded as the convolution would round it.
inline void backward_bf16(const ConvGeom& g, const std::uint8_t* argmax, const float* dy, std::uint16_t* dx) {
  const std::size_t row = g.iw * g.ic;
  const std::ptrdiff_t rows = std::ptrdiff_t(g.n * g.ih);
#pragma omp parallel
  {
    std::vector<float> tmp(row);
#pragma omp for schedule(static)
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      input_row(g, std::size_t(r), tmp.data(),
                [&](float* d, std::size_t o, std::size_t pos) { route(g.ic, argmax, dy, d, o, pos); });
      host::store_bf16(tmp.data(), dx + std::size_t(r) * row, row);
    }
  }
}

}  // namespace max_pool
}  // namespace onednn
}  // namespace backend
}  // namespace cifarnet
