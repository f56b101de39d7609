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
//
// The loops run with the channel count a compile-time constant where it is
// 16 to 256 (with_channels), and for bf16 x (and a bf16 dx) in AVX-512 16
// channels at a time where the build targets AVX512-BF16: airbench94's
// pools at batch 2000 on a 2-core AMX Xeon took 17.2 / 18.7 ms (forward /
// backward, 64 channels at 31x31), 15.0 / 16.7 (256 at 15x15) and 1.4 /
// 1.4 ms (256 at 7x7, 3x3 windows) against 25.4 / 25.7, 21.7 / 24.2 and
// 4.4 / 2.7 ms before, the same bits (docs/BENCHMARKS.md, 2026-12-04
// 20:24).
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

/// f(std::integral_constant<std::size_t, C>{}) for the channel counts the
/// loops here and in avg_pool_kernels.hpp take as constants (16 to 256),
/// f(std::integral_constant<std::size_t, 0>{}) for any other C: loops
/// with a constant trip count keep a pixel's values in registers and
/// have no remainder loops (the same operations in the same order: the
/// same bits).
template <class F>
inline void with_channels(std::size_t C, F&& f) {
  switch (C) {
    case 16:
      return f(std::integral_constant<std::size_t, 16>{});
    case 32:
      return f(std::integral_constant<std::size_t, 32>{});
    case 64:
      return f(std::integral_constant<std::size_t, 64>{});
    case 128:
      return f(std::integral_constant<std::size_t, 128>{});
    case 256:
      return f(std::integral_constant<std::size_t, 256>{});
    default:
      return f(std::integral_constant<std::size_t, 0>{});
  }
}

namespace detail {
// forward() with the channel count C a constant (CC > 0, with_channels)
// or read from g (CC == 0).
#ifdef CIFARNET_HOST_BF16_AVX512
// forward<CC> for bf16 x and a multiple of 16 channels in AVX-512: 16
// channels at a time, their maxima and argmax in registers over the window
// (the loops below, as the compiler made them, moved their bytes at about
// half the rate of the batch norms' passes). The same comparison (strict >, ordered: NaN
// never wins) in the same order, and y_bits through the same instruction
// as host::store_bf16 (VCVTNEPS2BF16): the same bits.
template <std::size_t CC>
void forward_avx512(const ConvGeom& g, const std::uint16_t* x, float* y, std::uint8_t* argmax,
                    std::uint16_t* y_bits) {
  static_assert(CC % 16 == 0 && CC > 0);
  const std::ptrdiff_t rows = std::ptrdiff_t(g.n * g.oh);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t r = 0; r < rows; ++r) {
    const std::size_t n = std::size_t(r) / g.oh, oy = std::size_t(r) % g.oh;
    for (std::size_t ox = 0; ox < g.ow; ++ox) {
      const std::size_t o = (std::size_t(r) * g.ow + ox) * CC;
      const std::uint16_t* x0 = x + (((n * g.ih) + oy * g.sh) * g.iw + ox * g.sw) * CC;
      for (std::size_t j = 0; j < CC; j += 16) {
        __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
        __m128i a = _mm_setzero_si128();
        for (std::size_t ky = 0; ky < g.kh; ++ky)
          for (std::size_t kx = 0; kx < g.kw; ++kx) {
            const std::uint16_t* xi = x0 + (ky * g.iw + kx) * CC + j;
            const __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xi))), 16));
            const __mmask16 win = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ);
            m = _mm512_mask_mov_ps(m, win, v);
            if (argmax) a = _mm_mask_mov_epi8(a, win, _mm_set1_epi8(char(ky * g.kw + kx)));
          }
        if (y)
          _mm512_storeu_ps(y + o + j, m);
        else
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(y_bits + o + j),
                              reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(m)));
        if (argmax) _mm_storeu_si128(reinterpret_cast<__m128i*>(argmax + o + j), a);
      }
    }
  }
}
#endif

template <std::size_t CC, class X>
void forward(const ConvGeom& g, const X* x, float* y, std::uint8_t* argmax, std::uint16_t* y_bits) {
#ifdef CIFARNET_HOST_BF16_AVX512
  if constexpr (std::is_same_v<X, std::uint16_t> && CC > 0 && CC % 16 == 0) {
    forward_avx512<CC>(g, x, y, argmax, y_bits);
    return;
  }
#endif
  const std::size_t C = CC ? CC : g.ic;
  const std::ptrdiff_t rows = std::ptrdiff_t(g.n * g.oh);
#pragma omp parallel
  {
    std::vector<float> pixel(y || CC ? 0 : C);  // y_bits alone: one pixel's maxima
    float stack[CC ? CC : 1];
    float* const buf = CC ? stack : pixel.data();
#pragma omp for schedule(static)
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      const std::size_t n = std::size_t(r) / g.oh, oy = std::size_t(r) % g.oh;
      for (std::size_t ox = 0; ox < g.ow; ++ox) {
        const std::size_t o = (std::size_t(r) * g.ow + ox) * C;
        float* __restrict yo = y ? y + o : buf;
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
}  // namespace detail

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
  with_channels(g.ic, [&](auto cc) { detail::forward<decltype(cc)::value>(g, x, y, argmax, y_bits); });
}

/// f(d, o, k) for each input pixel of g, in parallel over input rows: d its
/// C values in dx, o the offset of its window's output (kOutside when no
/// window covers it: f then zeroes d) and k its position in that window
/// (ky kw + kx). The backward passes of these kernels write dx through it.
inline constexpr std::size_t kOutside = ~std::size_t(0);
/// f(ix, o, k) for each pixel ix of input row r (image r / ih, row r % ih).
template <class F>
inline void input_pixels(const ConvGeom& g, std::size_t r, F&& f) {
  const std::size_t C = g.ic;
  const std::size_t n = r / g.ih, iy = r % g.ih;
  const std::size_t oy = iy / g.sh, ky = iy % g.sh;
  const bool row_in = oy < g.oh && ky < g.kh;
  for (std::size_t ix = 0; ix < g.iw; ++ix) {
    const std::size_t ox = ix / g.sw, kx = ix % g.sw;
    const bool in = row_in && ox < g.ow && kx < g.kw;
    f(ix, in ? ((n * g.oh + oy) * g.ow + ox) * C : kOutside, std::size_t(ky * g.kw + kx));
  }
}
/// f(d, o, k) for each pixel of input row r, d at dxr (the row's iw C
/// values).
template <class F>
inline void input_row(const ConvGeom& g, std::size_t r, float* dxr, F&& f) {
  input_pixels(g, r, [&](std::size_t ix, std::size_t o, std::size_t k) { f(dxr + ix * g.ic, o, k); });
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
// One input pixel's C values of dx (input_row's f for backward); C a
// constant where CC > 0 (with_channels).
template <std::size_t CC = 0>
inline void route(std::size_t C_, const std::uint8_t* argmax, const float* dy, float* __restrict d,
                  std::size_t o, std::size_t pos) {
  const std::size_t C = CC ? CC : C_;
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
  with_channels(g.ic, [&](auto cc) {
    each_input_pixel(g, dx, [&](float* d, std::size_t o, std::size_t pos) {
      route<decltype(cc)::value>(g.ic, argmax, dy, d, o, pos);
    });
  });
}
namespace detail {
// backward_bf16() for C a constant (CC > 0, with_channels) or read from g
// (CC == 0). A function of its own, not the body of with_channels' generic
// lambda: clang does not let an OpenMP region inside a generic lambda use
// the enclosing function's variables.
template <std::size_t CC>
void backward_bf16(const ConvGeom& g, const std::uint8_t* argmax, const float* dy, std::uint16_t* dx) {
  const std::size_t C = g.ic, row = g.iw * C;
  const std::ptrdiff_t rows = std::ptrdiff_t(g.n * g.ih);
#pragma omp parallel
  {
    std::vector<float> tmp(CC ? 0 : C);
    alignas(64) float stack[CC ? CC : 1];
    float* const d = CC ? stack : tmp.data();
#pragma omp for schedule(static)
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      std::uint16_t* dxr = dx + std::size_t(r) * row;
      input_pixels(g, std::size_t(r), [&](std::size_t ix, std::size_t o, std::size_t pos) {
#ifdef CIFARNET_HOST_BF16_AVX512
        if constexpr (CC > 0 && CC % 16 == 0) {  // 16 channels at a time, the same bits
          const __m128i k = _mm_set1_epi8(char(pos));
          for (std::size_t j = 0; j < CC; j += 16) {
            __m256i b = _mm256_setzero_si256();
            if (o != kOutside) {
              const __mmask16 at =
                  _mm_cmpeq_epi8_mask(_mm_loadu_si128(reinterpret_cast<const __m128i*>(argmax + o + j)), k);
              b = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(at, dy + o + j)));
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dxr + ix * CC + j), b);
          }
          return;
        }
#endif
        route<CC>(C, argmax, dy, d, o, pos);
        host::store_bf16(d, dxr + ix * C, C);
      });
    }
  }
}
}  // namespace detail

/// backward() with dx written as bfloat16 bits (host::store_bf16 of its
/// float dx, a pixel at a time from floats in cache): the dy of a bf16
/// convolution before the pool, rounded as the convolution would round it.
inline void backward_bf16(const ConvGeom& g, const std::uint8_t* argmax, const float* dy, std::uint16_t* dx) {
  with_channels(g.ic, [&](auto cc) { detail::backward_bf16<decltype(cc)::value>(g, argmax, dy, dx); });
}

}  // namespace max_pool
}  // namespace onednn
}  // namespace backend
}  // namespace cifarnet
