// cifarnet/backend/onednn/lrn_kernels.hpp — local response normalization
// across channels over float data in either layout, in the project's own
// OpenMP loops, used by the oneDNN backend's Lrn (onednn/lrn.hpp).
//
// Why not oneDNN's primitive: oneDNN 2.6 has JIT kernels for a window of 5
// channels only; the TensorFlow tutorial CNN's depth_radius 4 (a window of 9)
// fell to its reference implementation, `lrn_ref:any`: on a 2-core AVX2 EPYC
// at batch 32 (64 channels, 12x12, one thread) 7 ms a forward and 52 ms a
// backward, two thirds of the whole training step (ONEDNN_VERBOSE=1; the
// step's convolutions took 42 ms). These loops take any radius, either
// layout, and read x once per pass.
//
// TensorFlow's form, in float: d_c = bias + alpha * sum_{|j-c| <= r} x_j^2
// (the squares summed in ascending j), y_c = x_c * d_c^-beta; the backward
//   dx_j = dy_j * d_j^-beta
//          - 2 alpha beta x_j * sum_{|c-j| <= r} dy_c x_c d_c^-beta / d_c
// recomputes d from x (no workspace). For beta 0.75 (the tutorial's), 0.5
// and 1, d^-beta comes from r = 1/sqrt(d) by Newton steps (rsqrt below):
// d^-0.75 = r^2 / sqrt(r), 1/d = r^2, a few float roundings from the exact
// value; any other beta uses std::pow.
//
// The sums run over a copy of the squares padded with r zeros on both sides,
// so every channel adds 2r + 1 terms in one vectorizable loop per window
// offset (channels innermost in NHWC; a run of pixels innermost in NCHW).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cifarnet/ops/geometry.hpp"

namespace cifarnet {
namespace backend {
namespace onednn {
namespace lrn {

/// Pixels an NCHW work item covers (its scratch is (C + 2r) rows of them).
inline constexpr std::size_t kPixelRun = 64;

/// d^-beta for d > 0, by the cheapest exact-enough form for beta.
enum class Power { ThreeQuarters, Half, One, Any };
inline Power power_of(double beta) {
  if (beta == 0.75) return Power::ThreeQuarters;
  if (beta == 0.5) return Power::Half;
  if (beta == 1.0) return Power::One;
  return Power::Any;
}

/// 1/sqrt(d) for finite d > 0 by three Newton steps from the bit-pattern
/// estimate (relative error 3.4e-2, then 1.8e-3, 4.7e-6, then float's
/// rounding): plain arithmetic, so the loops around it vectorize (std::sqrt
/// does not without -fno-math-errno). NaN stays NaN. An infinite d (a square
/// that overflowed float, |x| > 1.8e19) gives NaN where TensorFlow's float
/// arithmetic gives 0: a select or a clamp for it made GCC 12 leave these
/// loops scalar, 5x slower, so it is left out.
inline float rsqrt(float d) {
  std::uint32_t i;
  std::memcpy(&i, &d, sizeof i);
  i = 0x5f375a86u - (i >> 1);
  float y;
  std::memcpy(&y, &i, sizeof y);
  const float h = 0.5f * d;
  y = y * (1.5f - h * y * y);
  y = y * (1.5f - h * y * y);
  y = y * (1.5f - h * y * y);
  return y;
}

/// d^-beta and d^-beta / d (the backward's factor), for d > 0.
template <Power P>
inline void neg_pow(float d, float beta, float& p, float& p_over_d) {
  if constexpr (P == Power::Any) {
    p = std::pow(d, -beta);
    p_over_d = p / d;
  } else {
    const float r = rsqrt(d), inv = r * r;  // d^-1/2, 1/d
    if constexpr (P == Power::ThreeQuarters)
      p = inv * rsqrt(r);  // d^-1 · d^1/4
    else if constexpr (P == Power::Half)
      p = r;
    else
      p = inv;
    p_over_d = p * inv;
  }
}

/// Floats of scratch one thread needs for g with window radius r.
inline std::size_t scratch_floats(const ChannelGeom& g, std::size_t r) {
  const std::size_t lanes = g.fmt == DataFormat::NHWC ? 1 : kPixelRun;
  return (2 * (g.c + 2 * r) + 2 * g.c) * lanes;
}

namespace detail {

/// The parameters as the loops use them.
struct Coeffs {
  std::size_t r;
  float bias, alpha, beta, two_alpha_beta;
  static Coeffs of(const LrnParams& p) {
    return {p.depth_radius, float(p.bias), float(p.alpha), float(p.beta), float(2.0 * p.alpha * p.beta)};
  }
};

/// acc[l] (l < L lanes, for each channel c < C) = the sum over the window of
/// padded rows: acc[c*L + l] = sum_k pad[(c + k)*L + l], k = 0..2r.
inline void window_sums(std::size_t C, std::size_t L, std::size_t r, const float* __restrict pad,
                        float* __restrict acc) {
  for (std::size_t i = 0; i < C * L; ++i) acc[i] = pad[i];
  for (std::size_t k = 1; k <= 2 * r; ++k) {
    const float* __restrict src = pad + k * L;
    for (std::size_t i = 0; i < C * L; ++i) acc[i] += src[i];
  }
}

/// acc[c*L + l] = the window's sum of squares of channel c, lane l, through
/// sq (C + 2R rows of L: the squares between R zero rows on each side).
/// Nhwc: L = 1 and cs = 1 as constants, so the copy loop runs over channels
/// in vectors whether or not the compiler inlines this.
template <bool Nhwc>
void sums_of_squares(std::size_t C, std::size_t run, std::size_t plane, std::size_t R, const float* x,
                     float* __restrict sq, float* __restrict acc) {
  const std::size_t L = Nhwc ? 1 : run, cs = Nhwc ? 1 : plane;
  std::fill(sq, sq + R * L, 0.f);
  std::fill(sq + (C + R) * L, sq + (C + 2 * R) * L, 0.f);
  for (std::size_t c = 0; c < C; ++c)
    for (std::size_t l = 0; l < L; ++l) {
      const float v = x[c * cs + l];
      sq[(c + R) * L + l] = v * v;
    }
  window_sums(C, L, R, sq, acc);
}

/// One work item: C channels × L lanes, element (c, l) at x[c*cs + l].
/// NHWC: one pixel (L = 1, cs = 1: the loops over c are the innermost);
/// NCHW: a run of L pixels of one image (cs = H*W). The scratch is
/// scratch_floats' share.
template <bool Nhwc, Power P>
void forward_item(const Coeffs& k, std::size_t C, std::size_t run, std::size_t plane, const float* x,
                  float* y, float* scratch) {
  const std::size_t R = k.r, rows = C + 2 * R, L = Nhwc ? 1 : run, cs = Nhwc ? 1 : plane;
  float* __restrict acc = scratch + 2 * rows * L;  // C × L
  sums_of_squares<Nhwc>(C, run, plane, R, x, scratch, acc);
  for (std::size_t c = 0; c < C; ++c)
    for (std::size_t l = 0; l < L; ++l) {
      const std::size_t i = c * cs + l;
      float p, p_over_d;
      neg_pow<P>(k.bias + k.alpha * acc[c * L + l], k.beta, p, p_over_d);
      y[i] = x[i] * p;
    }
}

template <bool Nhwc, Power P>
void backward_item(const Coeffs& k, std::size_t C, std::size_t run, std::size_t plane, const float* x,
                   const float* dy, float* dx, float* scratch) {
  const std::size_t R = k.r, rows = C + 2 * R, L = Nhwc ? 1 : run, cs = Nhwc ? 1 : plane;
  float* __restrict t = scratch + rows * L;  // rows × L, r zero rows each side
  float* __restrict acc = t + rows * L;      // C × L
  float* __restrict pw = acc + C * L;        // C × L: d^-beta
  sums_of_squares<Nhwc>(C, run, plane, R, x, scratch, acc);
  std::fill(t, t + R * L, 0.f);
  std::fill(t + (C + R) * L, t + rows * L, 0.f);
  for (std::size_t c = 0; c < C; ++c)
    for (std::size_t l = 0; l < L; ++l) {
      const std::size_t i = c * cs + l, a = c * L + l;
      float p, p_over_d;
      neg_pow<P>(k.bias + k.alpha * acc[a], k.beta, p, p_over_d);
      pw[a] = p;
      t[(c + R) * L + l] = dy[i] * x[i] * p_over_d;
    }
  window_sums(C, L, R, t, acc);
  for (std::size_t c = 0; c < C; ++c)
    for (std::size_t l = 0; l < L; ++l) {
      const std::size_t i = c * cs + l, a = c * L + l;
      dx[i] = dy[i] * pw[a] - k.two_alpha_beta * x[i] * acc[a];
    }
}

/// Runs item(offset, L, scratch) over every work item of g on `threads`
/// threads; each thread's scratch is `per_thread` floats from `scratch`.
template <class Item>
void for_each_item(const ChannelGeom& g, float* scratch, std::size_t per_thread, int threads, Item&& item) {
  if (g.fmt == DataFormat::NHWC) {
    const std::ptrdiff_t pixels = std::ptrdiff_t(g.n * g.h * g.w);
#pragma omp parallel num_threads(threads)
    {
      float* s = scratch + std::size_t(omp_get_thread_num()) * per_thread;
#pragma omp for schedule(static)
      for (std::ptrdiff_t p = 0; p < pixels; ++p) item(std::size_t(p) * g.c, std::size_t(1), s);
    }
  } else {
    const std::size_t plane = g.h * g.w, runs = (plane + kPixelRun - 1) / kPixelRun;
    const std::ptrdiff_t items = std::ptrdiff_t(g.n * runs);
#pragma omp parallel num_threads(threads)
    {
      float* s = scratch + std::size_t(omp_get_thread_num()) * per_thread;
#pragma omp for schedule(static)
      for (std::ptrdiff_t it = 0; it < items; ++it) {
        const std::size_t n = std::size_t(it) / runs, q0 = (std::size_t(it) % runs) * kPixelRun;
        item(n * g.c * plane + q0, std::min(kPixelRun, plane - q0), s);
      }
    }
  }
}

template <class F>
void with_power(double beta, F&& f) {
  switch (power_of(beta)) {
    case Power::ThreeQuarters:
      return f(std::integral_constant<Power, Power::ThreeQuarters>{});
    case Power::Half:
      return f(std::integral_constant<Power, Power::Half>{});
    case Power::One:
      return f(std::integral_constant<Power, Power::One>{});
    case Power::Any:
      return f(std::integral_constant<Power, Power::Any>{});
  }
}

}  // namespace detail

/// y = lrn(x). `scratch` holds threads × scratch_floats(g, p.depth_radius)
/// floats; `threads` at most omp_get_max_threads().
inline void forward(const ChannelGeom& g, const LrnParams& p, const float* x, float* y, float* scratch,
                    int threads) {
  const detail::Coeffs k = detail::Coeffs::of(p);
  const std::size_t per = scratch_floats(g, k.r), C = g.c, plane = g.h * g.w;
  detail::with_power(p.beta, [&](auto P) {
    detail::for_each_item(g, scratch, per, threads, [&](std::size_t o, std::size_t L, float* s) {
      if (g.fmt == DataFormat::NHWC)
        detail::forward_item<true, decltype(P)::value>(k, C, L, plane, x + o, y + o, s);
      else
        detail::forward_item<false, decltype(P)::value>(k, C, L, plane, x + o, y + o, s);
    });
  });
}

/// dx from x and dy (dx overwritten). y (forward) and dx may alias x or dy:
/// a work item reads all of its elements before it writes any.
inline void backward(const ChannelGeom& g, const LrnParams& p, const float* x, const float* dy, float* dx,
                     float* scratch, int threads) {
  const detail::Coeffs k = detail::Coeffs::of(p);
  const std::size_t per = scratch_floats(g, k.r), C = g.c, plane = g.h * g.w;
  detail::with_power(p.beta, [&](auto P) {
    detail::for_each_item(g, scratch, per, threads, [&](std::size_t o, std::size_t L, float* s) {
      if (g.fmt == DataFormat::NHWC)
        detail::backward_item<true, decltype(P)::value>(k, C, L, plane, x + o, dy + o, dx + o, s);
      else
        detail::backward_item<false, decltype(P)::value>(k, C, L, plane, x + o, dy + o, dx + o, s);
    });
  });
}

}  // namespace lrn
}  // namespace onednn
}  // namespace backend
}  // namespace cifarnet
