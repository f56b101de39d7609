// cifarnet/backend/onednn/bn_kernels.hpp — batch normalization's reductions
// and element-wise passes in the project's own OpenMP loops (float data,
// float blocks summed in double), used by the oneDNN backend's BatchNorm for
// the training forward and the backward.
//
// Why not oneDNN's primitives: oneDNN 2.6's batch normalization sums each
// channel's n*h*w values in float, one after the other in NHWC (131,072 terms
// per channel for a ResNet stage-1 map at batch 128). Its mean and variance
// were off by up to 7e-6 and 2.4e-5 of their size there (NHWC), and these
// errors, amplified through the backward pass, put one ResNet-20 step's
// gradients 10-40x further from exact arithmetic than an fp32 step needs to be
// (docs/NUMERICS.md). Here every per-channel sum is blocked: float sums of 16
// rows (NHWC) or 256 values (NCHW), added into double totals, of values
// shifted by a sample of the channel so the variance does not cancel. Each
// thread sums a fixed contiguous share of the data and the shares are added
// in thread order, so results depend on the thread count only, not on
// timing. The element-wise passes are float. The data is read once per pass,
// as oneDNN reads it, in loops the compiler vectorizes. x may also be
// bfloat16 bits (the bf16 output of the convolution in front, widened
// exactly by widen()), dx may be written as bfloat16, y may get a bf16 copy
// in the same pass, and the normalising pass may add a residual branch
// (affine_sum): the hand-overs of docs/ARCHITECTURE.md.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>  // Eigen's vectorized erf (packet math)

#include "cifarnet/backend/host/bf16.hpp"
#include "cifarnet/backend/host/mask_bits.hpp"
#include "cifarnet/backend/host/prefetch.hpp"
#include "cifarnet/backend/host/stream_store.hpp"
#include "cifarnet/ops/geometry.hpp"

namespace cifarnet {
namespace backend {
namespace onednn {
namespace bn {

/// A contiguous share [begin, end) of `total` items for thread t of nt.
inline std::size_t share(std::size_t total, int t, int nt) {
  return total * std::size_t(t) / std::size_t(nt);
}

/// Buffers of the passes, kept by the op between calls so that a training
/// step allocates nothing here once the sizes are known.
struct Scratch {
  std::vector<double> part;  ///< per thread: 2C double partial sums
  std::vector<float> block;  ///< per thread: 2C float block sums
  std::vector<double> sums;  ///< 2C totals
  std::vector<float> coef;   ///< 3C per-channel constants (shift/scale/offset, A/B/D)
  std::vector<float> wpart;  ///< per image: input_gradient_into_weight_gradient's float partials
  std::vector<float> wpad;   ///< per thread: its zero-padded image
};

/// Rows (NHWC) or planes (NCHW) summed in float before their sums are added
/// to the double totals: short float sums keep the loops at float SIMD width
/// while their rounding stays at the level of a few float ulps.
inline constexpr std::size_t kBlockRows = 16;

/// The GELU fused after batch normalization (exact erf form, PyTorch's
/// nn.GELU() default): gelu(z) = z Φ(z), gelu'(z) = Φ(z) + z φ(z) with
/// Φ(z) = (1 + erf(z/√2))/2, φ(z) = exp(-z²/2)/√(2π). Written as Eigen array
/// expressions over a row (NHWC) or plane (NCHW) so erf and exp run as
/// Eigen's vectorized packet functions (float erf to a few ulp, as oneDNN's
/// gelu_erf); z = x a + b is formed inside the expression, never stored.
namespace gelu {
inline constexpr float kRsqrt2 = 0.70710678118654752f, kRsqrt2Pi = 0.39894228040143268f;
using Row = Eigen::Array<float, Eigen::Dynamic, 1>;
using In = Eigen::Map<const Row>;
using Out = Eigen::Map<Row>;

/// y = gelu(z) for the expression z.
template <class Z>
inline void value(const Z& z, Out y) {
  y = z * (0.5f + 0.5f * (z * kRsqrt2).erf());
}
/// u = dy gelu'(z) for the expressions z and dy (u: a map of any length).
template <class Z, class D, class U>
inline void grad(const Z& z, const D& dy, U u) {
  u = dy * (0.5f + 0.5f * (z * kRsqrt2).erf() + kRsqrt2Pi * z * (-0.5f * z.square()).exp());
}
// The four entry points, plain functions so the Eigen code is compiled once
// per program, not once per channel count: per-value a, b (an NHWC row) or
// one a, b (an NCHW plane), n values each.
inline void value_row(std::size_t n, const float* x, const float* a, const float* b, float* y) {
  const auto m = Eigen::Index(n);
  value(In(x, m) * In(a, m) + In(b, m), Out(y, m));
}
inline void value_plane(std::size_t n, const float* x, float a, float b, float* y) {
  const auto m = Eigen::Index(n);
  value(In(x, m) * a + b, Out(y, m));
}
inline void grad_row(std::size_t n, const float* x, const float* dy, const float* a, const float* b,
                     float* u) {
  const auto m = Eigen::Index(n);
  grad(In(x, m) * In(a, m) + In(b, m), In(dy, m), Out(u, m));
}
/// grad_row for a row of N values known at compile time (the sums' NHWC
/// loop for the channel counts with_channels names: airbench's BN+GELU
/// backward at 256 channels about 15 % faster than with the run-time length).
template <std::size_t N>
inline void grad_row(const float* x, const float* dy, const float* a, const float* b, float* u) {
  using R = Eigen::Array<float, int(N), 1>;
  const Eigen::Map<const R> xv(x), av(a), bv(b), dv(dy);
  grad(xv * av + bv, dv, Eigen::Map<R>(u));
}
inline void grad_plane(std::size_t n, const float* x, const float* dy, float a, float b, float* u) {
  const auto m = Eigen::Index(n);
  grad(In(x, m) * a + b, In(dy, m), Out(u, m));
}
}  // namespace gelu

/// The rows ahead of the one being read, prefetched (host/prefetch.hpp).
inline void ahead(const void* p) { host::prefetch_ahead(p); }

/// T itself, in a context where it is not deduced (a dy given as nullptr).
template <class T>
struct Same {
  using type = T;
};

/// An element of the input x as float (host::widen): x is float, or
/// bfloat16 bits (the bf16 output of the convolution in front,
/// ConvBatchNorm, or of the max pool in front, pool_bf16_output_to_bn),
/// widened exactly. Every pass below takes either; the fused GELU takes
/// bits in NHWC rows of the channel counts with_channels names only (each
/// row widened into a buffer first).
using host::widen;

/// The fused ReLU's mask of an element, recomputed in the backward from x
/// and the forward's a, b (relu_ab: a then b, C each) instead of stored: the
/// forward's own test on the same float expression (affine_row), so the
/// same bits, and 3 bytes per element less to move (a mask byte written
/// forward, read by both backward passes).
/// 1 or 0 as a float (dy times it: the masked gradient, NaN dy staying NaN as
/// with a stored mask).
inline float relu_on(float x, float a, float b) { return host::keep_if(x * a + b > 0.f, 1.f); }

/// bn(x) = x a + b per channel: a = gamma / sqrt(var + eps), b = beta - mean a
/// (the training forward's coefficients from the batch statistics, the
/// inference's from the moving ones).
inline void scale_shift(double gamma, double beta, double mean, double var, double eps, float& a, float& b) {
  const double scale = gamma / std::sqrt(var + eps);
  a = float(scale);
  b = float(beta - mean * scale);
}

/// The fused GELU's input to the backward sums: the forward's per-channel
/// a and b (z = x a + b, from the forward's statistics and gamma/beta), and
/// the buffer (dx, overwritten later) that receives u = dy gelu'(z).
struct GeluGrad {
  const float* a;
  const float* b;
  float* u;
};

/// The two per-channel sums of one pass over (n, h, w), into sc.sums:
///   sums[c] = sum u, sums[C + c] = sum u * v
/// with u = x - k[c] and v = x - k[c] (statistics: kind Stats), or
/// u = dy * mask and v = x - k[c] (backward: kind Grad). Each thread sums a
/// contiguous share of the rows (NHWC) or planes (NCHW), in float blocks
/// added into its own double partial sums; the partials are added in thread
/// order.
enum class SumKind { Stats, Grad };

/// channel_sums' NHWC loop for a channel count C known at compile time:
/// rows [r0, r1) added into s1/s2 (C doubles each). The same sums in the same
/// order as the generic loop, so the same bits, but the block sums, shifts
/// and double totals are local arrays the compiler keeps in registers
/// instead of loading and storing them for every row (with affine() and
/// input_gradient() below: BN's time in a ResNet-20 step -35 %,
/// docs/BENCHMARKS.md).
/// `block(rb, re)` runs before each block of rows [rb, re) is summed (it
/// may write those rows of dy: sum_into_dy_with_sums); where it returns a
/// pointer that is not null, the block's dy rows are read from there
/// (row r at (r - rb) * C: a copy in L1 of rows it streamed to dy).
struct NoBlockWork {
  void operator()(std::size_t, std::size_t) const {}
};
template <SumKind K, std::size_t C, class X, class DY, class Block = NoBlockWork>
void nhwc_sums(std::size_t r0, std::size_t r1, const X* __restrict x, const DY* dy,
               const float* __restrict relu_ab, const float* __restrict k, double* __restrict s1,
               double* __restrict s2, const GeluGrad* gg, Block&& block = Block{}) {
  double d1[C], d2[C];
  float kc[C], ka[C], kb[C];  // the shift, the ReLU's a and b
  for (std::size_t c = 0; c < C; ++c) {
    d1[c] = d2[c] = 0.0;
    kc[c] = k[c];
    ka[c] = relu_ab ? relu_ab[c] : 0.f;
    kb[c] = relu_ab ? relu_ab[C + c] : 0.f;
  }
  for (std::size_t rb = r0; rb < r1; rb += kBlockRows) {
    const std::size_t re = std::min(r1, rb + kBlockRows);
    const DY* from = nullptr;  // the block's dy rows elsewhere, or null: in dy
    if constexpr (std::is_void_v<decltype(block(rb, re))>)
      block(rb, re);
    else
      from = block(rb, re);
    float b1[C], b2[C];
    for (std::size_t c = 0; c < C; ++c) b1[c] = b2[c] = 0.f;
    for (std::size_t r = rb; r < re; ++r) {
      const X* __restrict xr = x + r * C;
      ahead(xr);
      if (dy && !from) ahead(dy + r * C);
      if constexpr (K == SumKind::Stats) {
#pragma omp simd
        for (std::size_t c = 0; c < C; ++c) {
          const float v = widen(xr[c]) - kc[c];
          b1[c] += v;
          b2[c] += v * v;
        }
      } else if (gg) {  // u = dy gelu'(x a + b), stored for input_gradient, then summed
        if constexpr (std::is_same_v<DY, float>) {
          float* __restrict ur = gg->u + r * C;
          const float* xf = nullptr;
          alignas(64) float wide[C];  // x as bf16 bits (a max pool's bf16 output), widened first
          if constexpr (std::is_same_v<X, float>) {
            xf = xr;
          } else {
#pragma omp simd
            for (std::size_t c = 0; c < C; ++c) wide[c] = widen(xr[c]);
            xf = wide;
          }
          gelu::grad_row<C>(xf, dy + r * C, gg->a, gg->b, ur);
#pragma omp simd
          for (std::size_t c = 0; c < C; ++c) {
            const float u = ur[c];
            b1[c] += u;
            b2[c] += u * (xf[c] - kc[c]);
          }
        }
      } else if (relu_ab) {
        const DY* __restrict dr = from ? from + (r - rb) * C : dy + r * C;
#pragma omp simd
        for (std::size_t c = 0; c < C; ++c) {
          const float xv = widen(xr[c]);
          const float u = widen(dr[c]) * relu_on(xv, ka[c], kb[c]);
          b1[c] += u;
          b2[c] += u * (xv - kc[c]);
        }
      } else {
        const DY* __restrict dr = from ? from + (r - rb) * C : dy + r * C;
#pragma omp simd
        for (std::size_t c = 0; c < C; ++c) {
          const float u = widen(dr[c]);
          b1[c] += u;
          b2[c] += u * (widen(xr[c]) - kc[c]);
        }
      }
    }
    for (std::size_t c = 0; c < C; ++c) {
      d1[c] += double(b1[c]);
      d2[c] += double(b2[c]);
    }
  }
  for (std::size_t c = 0; c < C; ++c) {
    s1[c] += d1[c];
    s2[c] += d2[c];
  }
}

template <SumKind K, std::size_t CC = 0, class X = float, class DY = float>
void channel_sums(const ChannelGeom& g, const X* __restrict x, const typename Same<DY>::type* __restrict dy,
                  const float* __restrict relu_ab, const float* __restrict k, Scratch& sc,
                  const GeluGrad* gg = nullptr) {
  const std::size_t C = CC ? CC : g.c, hw = g.h * g.w;
  const int nt = std::max(1, omp_get_max_threads());
  sc.part.assign(std::size_t(nt) * 2 * C, 0.0);
  sc.block.resize(std::size_t(nt) * 2 * C);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), n_threads = omp_get_num_threads();
    double* __restrict s1 = sc.part.data() + std::size_t(t) * 2 * C;
    double* __restrict s2 = s1 + C;
    float* __restrict b1 = sc.block.data() + std::size_t(t) * 2 * C;
    float* __restrict b2 = b1 + C;
    auto term = [&](std::size_t i, std::size_t c, float kc, float& u, float& v) {
      const float xv = widen(x[i]);
      v = xv - kc;
      if constexpr (K == SumKind::Stats) {
        u = v;
      } else if (gg) {
        u = gg->u[i];  // computed by the row's or plane's gelu::grad just before
      } else {
        u = relu_ab ? widen(dy[i]) * relu_on(xv, relu_ab[c], relu_ab[C + c]) : widen(dy[i]);
      }
    };
    // The fused GELU's u = dy gelu'(x a + b) for n values at `base` with the
    // coefficients a, b (length n: an NHWC row; length 1: an NCHW plane).
    auto gelu_u = [&](std::size_t base, std::size_t n, const float* a, const float* b, bool per_value) {
      if constexpr (std::is_same_v<X, float> && std::is_same_v<DY, float>) {
        if (per_value)
          gelu::grad_row(n, x + base, dy + base, a, b, gg->u + base);
        else
          gelu::grad_plane(n, x + base, dy + base, *a, *b, gg->u + base);
      }
    };
    if (g.fmt == DataFormat::NHWC && CC != 0) {
      const std::size_t rows = g.n * hw, r0 = share(rows, t, n_threads), r1 = share(rows, t + 1, n_threads);
      if constexpr (CC != 0) nhwc_sums<K, CC, X, DY>(r0, r1, x, dy, relu_ab, k, s1, s2, gg);
    } else if (g.fmt == DataFormat::NHWC) {
      const std::size_t rows = g.n * hw, r0 = share(rows, t, n_threads), r1 = share(rows, t + 1, n_threads);
      for (std::size_t rb = r0; rb < r1; rb += kBlockRows) {
        const std::size_t re = std::min(r1, rb + kBlockRows);
        for (std::size_t c = 0; c < C; ++c) b1[c] = b2[c] = 0.f;
        for (std::size_t r = rb; r < re; ++r) {
          const std::size_t base = r * C;
          if (K == SumKind::Grad && gg) gelu_u(base, C, gg->a, gg->b, true);
#pragma omp simd
          for (std::size_t c = 0; c < C; ++c) {
            float u, v;
            term(base + c, c, k[c], u, v);
            b1[c] += u;
            b2[c] += u * v;
          }
        }
        for (std::size_t c = 0; c < C; ++c) {
          s1[c] += double(b1[c]);
          s2[c] += double(b2[c]);
        }
      }
    } else {
      const std::size_t planes = g.n * C, p0 = share(planes, t, n_threads),
                        p1 = share(planes, t + 1, n_threads);
      for (std::size_t p = p0; p < p1; ++p) {
        const std::size_t c = p % C, base = p * hw;
        const float kc = k[c];
        if (K == SumKind::Grad && gg) gelu_u(base, hw, gg->a + c, gg->b + c, false);
        double a = 0, b = 0;
        for (std::size_t ib = 0; ib < hw; ib += 256) {  // float sums of 256 values, then double
          const std::size_t ie = std::min(hw, ib + 256);
          float fa = 0.f, fb = 0.f;
#pragma omp simd reduction(+ : fa, fb)
          for (std::size_t i = ib; i < ie; ++i) {
            float u, v;
            term(base + i, c, kc, u, v);
            fa += u;
            fb += u * v;
          }
          a += double(fa);
          b += double(fb);
        }
        s1[c] += a;
        s2[c] += b;
      }
    }
  }
  sc.sums.assign(2 * C, 0.0);
  for (int t = 0; t < nt; ++t)
    for (std::size_t j = 0; j < 2 * C; ++j) sc.sums[j] += sc.part[std::size_t(t) * 2 * C + j];
}

/// dy = a + b where the ReLU mask bit is set (mask null: everywhere; a, b
/// float or bfloat16 bits, dy bfloat16 bits: host::add_masked_word), and
/// the backward sums of channel_sums<Grad> over those dy bits (x, the
/// fused ReLU's a, b in `relu_ab` or null, the shift k) in the same pass,
/// into sc.sums: a residual block's backward sum (or the sum of a batch
/// norm's readers' gradients) that writes a batch norm's dy while taking
/// that batch norm's sums (bn_sums_in_dy_sum). nhwc_sums writes each
/// block of kBlockRows rows of dy just before it sums them (in L1), with
/// channel_sums' threads, shares, blocks and order: the same bits as the
/// sum's pass followed by channel_sums. Where dy is at least the threads'
/// L2 (host::stream_output: the batch norm's dy buffer was last touched a
/// step ago), each block is formed in a buffer on the stack, summed from
/// there and streamed to dy: the same bits.
/// NHWC, C = CC (16, 32, 64 or 256).
template <std::size_t CC, class A, class Bv, class X>
void sum_into_dy_with_sums(const ChannelGeom& g, const A* __restrict a, const Bv* __restrict b,
                           const std::uint16_t* __restrict mask, std::uint16_t* __restrict dy,
                           const X* __restrict x, const float* __restrict relu_ab, const float* __restrict k,
                           Scratch& sc) {
  static_assert(CC % 16 == 0 && CC != 0, "bn::sum_into_dy_with_sums: 16, 32, 64 or 256 channels");
  const int nt = std::max(1, omp_get_max_threads());
  const std::size_t rows = g.n * g.h * g.w;
  const bool stream = host::stream_output(rows * CC * sizeof(std::uint16_t), dy, nt);
  sc.part.assign(std::size_t(nt) * 2 * CC, 0.0);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), n_threads = omp_get_num_threads();
    double* __restrict s1 = sc.part.data() + std::size_t(t) * 2 * CC;
    double* __restrict s2 = s1 + CC;
    const std::size_t r0 = share(rows, t, n_threads), r1 = share(rows, t + 1, n_threads);
    alignas(64) std::uint16_t buf[kBlockRows * CC];  // a block's rows, where streamed
    nhwc_sums<SumKind::Grad, CC, X, std::uint16_t>(
        r0, r1, x, dy, relu_ab, k, s1, s2, nullptr,
        [&](std::size_t rb, std::size_t re) -> const std::uint16_t* {
          for (std::size_t r = rb; r < re; ++r) {
            ahead(a + r * CC);
            ahead(b + r * CC);
            std::uint16_t* to = stream ? buf + (r - rb) * CC : dy + r * CC;
            for (std::size_t j = 0, i = r * CC; j < CC; j += 16, i += 16)
              host::add_masked_word(a + i, b + i, mask ? mask[i / 16] : std::uint16_t(0xFFFF), to + j);
          }
          if (!stream) return nullptr;
          host::stream_copy(buf, dy + rb * CC, (re - rb) * CC);
          return buf;
        });
    if (stream) host::stream_fence();
  }
  sc.sums.assign(2 * CC, 0.0);
  for (int t = 0; t < nt; ++t)
    for (std::size_t j = 0; j < 2 * CC; ++j) sc.sums[j] += sc.part[std::size_t(t) * 2 * CC + j];
}

/// f(r, ac, bc) for every NHWC row r of this thread's share (rows of CC
/// channels), in parallel, with a and b copied into local arrays first so
/// the compiler keeps them in registers (affine, affine_sum); `after()`
/// runs on each thread when its share is done.
template <std::size_t CC, class F, class After = void (*)()>
void nhwc_rows_ab(
    const ChannelGeom& g, const float* __restrict a, const float* __restrict b, F&& f, After after = [] {}) {
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::size_t rows = g.n * g.h * g.w, r0 = share(rows, t, nt), r1 = share(rows, t + 1, nt);
    float ac[CC], bc[CC];
    for (std::size_t c = 0; c < CC; ++c) {
      ac[c] = a[c];
      bc[c] = b[c];
    }
    for (std::size_t r = r0; r < r1; ++r) f(r, ac, bc);
    after();
  }
}

/// One NHWC row of affine(): C values (CC when known at compile time).
template <std::size_t CC, class X>
inline void affine_row(std::size_t C, const X* __restrict xs, const float* __restrict a,
                       const float* __restrict b, float* __restrict ys, bool relu) {
  const std::size_t n = CC ? CC : C;
  if (relu) {
#pragma omp simd
    for (std::size_t c = 0; c < n; ++c) {
      const float v = widen(xs[c]) * a[c] + b[c];
      ys[c] = v > 0.f ? v : 0.f;
    }
  } else {
#pragma omp simd
    for (std::size_t c = 0; c < n; ++c) ys[c] = widen(xs[c]) * a[c] + b[c];
  }
}

/// y[i] = x[i] * a[c] + b[c] (with `relu`: max(., 0); its mask is not
/// stored: the backward recomputes it, relu_on), parallel over rows (NHWC)
/// or planes (NCHW).
template <std::size_t CC = 0, class X = float>
void affine(const ChannelGeom& g, const X* __restrict x, const float* __restrict a, const float* __restrict b,
            float* __restrict y, bool relu, std::uint16_t* __restrict yb = nullptr) {
  const std::size_t C = CC ? CC : g.c, hw = g.h * g.w;
  const bool nhwc = g.fmt == DataFormat::NHWC;
  if constexpr (CC != 0) {  // NHWC with C known: the row loop without branches, constants in registers
#ifdef CIFARNET_HOST_BF16_AVX512
    // the bf16 copy alone (ResNet's stem: bn_bf16_stream_into_block), kept
    // for later: streamed where large (host/stream_store.hpp)
    if (!y && yb &&
        host::stream_output(g.n * g.h * g.w * CC * sizeof(std::uint16_t), yb, omp_get_max_threads())) {
      nhwc_rows_ab<CC>(
          g, a, b,
          [&](std::size_t r, const float* ac, const float* bc) {
            alignas(64) float row[CC];
            ahead(x + r * C);
            affine_row<CC>(C, x + r * C, ac, bc, row, relu);
            host::stream_bf16(row, yb + r * C, CC);
          },
          [] { host::stream_fence(); });
      return;
    }
#endif
    nhwc_rows_ab<CC>(g, a, b, [&](std::size_t r, const float* ac, const float* bc) {
      float row[CC];  // y == nullptr: the row only on its way to yb (bf16_only)
      float* yr = y ? y + r * C : row;
      ahead(x + r * C);
      affine_row<CC>(C, x + r * C, ac, bc, yr, relu);
      if (yb) host::store_bf16(yr, yb + r * C, CC);
    });
    return;
  }
  const std::ptrdiff_t units = std::ptrdiff_t(nhwc ? g.n * hw : g.n * C);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t u = 0; u < units; ++u) {
    const std::size_t len = nhwc ? C : hw, base = std::size_t(u) * len;
    const X* __restrict xs = x + base;
    float* __restrict ys = y + base;
    if (nhwc) {
      affine_row<0>(C, xs, a, b, ys, relu);
    } else {
      const std::size_t c = std::size_t(u) % C;
      const float ac = a[c], bc = b[c];
      if (relu) {
#pragma omp simd
        for (std::size_t i = 0; i < hw; ++i) {
          const float v = widen(xs[i]) * ac + bc;
          ys[i] = v > 0.f ? v : 0.f;
        }
      } else {
#pragma omp simd
        for (std::size_t i = 0; i < hw; ++i) ys[i] = widen(xs[i]) * ac + bc;
      }
    }
    if (yb) host::store_bf16(ys, yb + base, len);
  }
}

/// One NHWC row of affine_sum(): C values (CC when known at compile time).
template <std::size_t CC, bool Relu, class X, class R>
inline void affine_sum_row(std::size_t C, const X* __restrict xs, const float* __restrict a,
                           const float* __restrict b, const R* __restrict rs, float* __restrict ys) {
  const std::size_t n = CC ? CC : C;
#pragma omp simd
  for (std::size_t c = 0; c < n; ++c) {
    const float v = (widen(xs[c]) * a[c] + b[c]) + widen(rs[c]);
    ys[c] = Relu && v < 0.f ? 0.f : v;
  }
}

#ifdef CIFARNET_HOST_BF16_AVX512
/// affine_sum()'s NHWC rows of CC channels (a multiple of 16) in AVX-512
/// registers, 16 channels a vector, where the sum goes out as its bf16 copy
/// alone (yb, and the mask where given; no float y): the row is never
/// stored as floats on the stack to be read back for the copy and the mask
/// (the mask's 512-bit load of the row's 256-bit stores stalled: the pass
/// ran at half this one's speed at 16 and 64 channels with the tensors in
/// cache, 1.0-1.24x from memory; with a float y the row loop stays, which
/// was faster from memory: docs/BENCHMARKS.md, 2026-12-05 04:00).
/// The same operations as affine_sum_row: the arithmetic is one expression
/// on vector types, (x * a + b) + r, which the compiler contracts (or not)
/// as it does the row loop's scalar one (GCC at -O2 and above with its
/// default -ffp-contract=fast, clang always within an expression: an FMA
/// there, a product and a sum at GCC's -O1), so that the pass keeps the
/// bits of batch norm's own pass followed by the sum; max(0, v) keeps NaN
/// and -0 as the loop's `v < 0` test does; the rounding of host::store_bf16
/// (VCVTNEPS2BF16) and the mask of host::positive_bits (v > 0, ordered).
template <std::size_t CC, class X, class R>
void affine_sum_rows_avx512(const ChannelGeom& g, const X* __restrict x, const float* __restrict a,
                            const float* __restrict b, const R* __restrict r, bool relu,
                            std::uint16_t* __restrict yb, std::uint16_t* __restrict mask) {
  constexpr std::size_t K = CC / 16;
  // the block's output kept for later: streamed where large (host/stream_store.hpp)
  const bool stream =
      host::stream_output(g.n * g.h * g.w * CC * sizeof(std::uint16_t), yb, omp_get_max_threads());
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::size_t rows = g.n * g.h * g.w, r0 = share(rows, t, nt), r1 = share(rows, t + 1, nt);
    __m512 av[K], bv[K];
    for (std::size_t k = 0; k < K; ++k) {
      av[k] = _mm512_loadu_ps(a + 16 * k);
      bv[k] = _mm512_loadu_ps(b + 16 * k);
    }
    const __m512 zero = _mm512_setzero_ps();
    for (std::size_t q = r0; q < r1; ++q) {
      const std::size_t base = q * CC;
      ahead(x + base);
      ahead(r + base);
      for (std::size_t k = 0; k < K; ++k) {
        const std::size_t at = base + 16 * k;
        // as affine_sum_row's expression (x and r widened exactly: host::detail::load16)
        __m512 v = (host::detail::load16(x + at) * av[k] + bv[k]) + host::detail::load16(r + at);
        if (mask) mask[q * K + k] = std::uint16_t(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ));
        if (relu) v = _mm512_max_ps(zero, v);  // the second operand where either is NaN or both are 0
        if (stream)
          host::stream16_bf16(v, yb + at);  // the same rounding
        else
          host::detail::store16(v, yb + at);  // VCVTNEPS2BF16, as host::store_bf16
      }
    }
    if (stream) host::stream_fence();
  }
}
#endif

/// y[i] = (x[i] a[c] + b[c]) + r[i], then max(., 0) with `relu` (NaN
/// propagates, as Eltwise::add): batch norm's output and a residual
/// branch summed in the pass that normalises (Residual, ConvBatchNorm), the
/// same float operations as the two passes. Parallel over rows (NHWC) or
/// planes (NCHW). With `mask` (NHWC with CC known only: sum_mask(g)), bit
/// i % 16 of mask[i / 16] is set where y[i] > 0 (host::positive_bits), the
/// ReLU's mask for the backward's Eltwise::add_masked_bits. r is float or
/// bfloat16 bits (the previous block's output as its bf16 copy, widened
/// exactly: the residual stream in bf16). y may be null with yb (NHWC with
/// CC known only): the sum then goes out only as its bf16 copy (and mask).
template <std::size_t CC = 0, class X = float, class R = float>
void affine_sum(const ChannelGeom& g, const X* __restrict x, const float* __restrict a,
                const float* __restrict b, const R* __restrict r, bool relu, float* __restrict y,
                std::uint16_t* __restrict yb = nullptr, std::uint16_t* __restrict mask = nullptr) {
  const std::size_t C = CC ? CC : g.c, hw = g.h * g.w;
  const bool nhwc = g.fmt == DataFormat::NHWC;
  auto row = [&](std::size_t base, const float* ac, const float* bc, float* yr) {
    ahead(x + base);
    ahead(r + base);
    if (relu)
      affine_sum_row<CC, true>(C, x + base, ac, bc, r + base, yr);
    else
      affine_sum_row<CC, false>(C, x + base, ac, bc, r + base, yr);
    if (yb) host::store_bf16(yr, yb + base, C);
  };
  if constexpr (CC != 0) {  // NHWC with C known: constants in registers
    static_assert(CC % 16 == 0, "bn::affine_sum: the mask's words cover 16 channels each");
#ifdef CIFARNET_HOST_BF16_AVX512
    if (!y) {
      affine_sum_rows_avx512<CC>(g, x, a, b, r, relu, yb, mask);
      return;
    }
#endif
    nhwc_rows_ab<CC>(g, a, b, [&](std::size_t q, const float* ac, const float* bc) {
      alignas(64) float tmp[CC];  // y == nullptr: the row only on its way to yb and the mask
      float* yr = y ? y + q * C : tmp;
      row(q * C, ac, bc, yr);
      if (mask)
        for (std::size_t j = 0; j < CC / 16; ++j) mask[q * (CC / 16) + j] = host::positive_bits(yr + 16 * j);
    });
    return;
  }
  const std::ptrdiff_t units = std::ptrdiff_t(nhwc ? g.n * hw : g.n * C);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t u = 0; u < units; ++u) {
    const std::size_t base = std::size_t(u) * (nhwc ? C : hw);
    if (nhwc) {
      row(base, a, b, y + base);
    } else {
      const std::size_t c = std::size_t(u) % C;
      const float ac = a[c], bc = b[c];
#pragma omp simd
      for (std::size_t i = 0; i < hw; ++i) {
        const float v = (widen(x[base + i]) * ac + bc) + widen(r[base + i]);
        y[base + i] = relu && v < 0.f ? 0.f : v;
      }
      if (yb) host::store_bf16(y + base, yb + base, hw);
    }
  }
}

/// One NHWC row of input_gradient(): C values (CC when known at compile time).
/// ds and os may be the same buffer (the fused GELU's u is overwritten by
/// dx), so they are not restrict; each element is read before it is written.
template <std::size_t CC, class X, class DY>
inline void input_gradient_row(std::size_t C, const X* __restrict xs, const DY* ds,
                               const float* __restrict ra, const float* __restrict rb,
                               const float* __restrict mean, const float* __restrict A,
                               const float* __restrict B, const float* __restrict D, float* os) {
  const std::size_t n = CC ? CC : C;
  if (ra) {
#pragma omp simd
    for (std::size_t c = 0; c < n; ++c) {
      const float xv = widen(xs[c]);
      os[c] = A[c] * (widen(ds[c]) * relu_on(xv, ra[c], rb[c])) + B[c] * (xv - mean[c]) + D[c];
    }
  } else {
#pragma omp simd
    for (std::size_t c = 0; c < n; ++c) os[c] = A[c] * widen(ds[c]) + B[c] * (widen(xs[c]) - mean[c]) + D[c];
  }
}

/// dx[i] = A[c] dyr + B[c] (x[i] - mean[c]) + D[c], dyr = dy (or, with
/// `relu_ab`, dy times the fused ReLU's mask, relu_on), parallel over rows
/// (NHWC) or planes (NCHW); dy == dx allowed. With `dx_bf16`, dx is written
/// there as bfloat16 (host::store_bf16) instead, through a float block on
/// the stack: dx is not touched.
template <std::size_t CC = 0, class X = float, class DY = float>
void input_gradient(const ChannelGeom& g, const X* __restrict x, const DY* dy,
                    const float* __restrict relu_ab, const float* __restrict mean, const float* __restrict A,
                    const float* __restrict B, const float* __restrict D, float* dx,
                    std::uint16_t* __restrict dx_bf16 = nullptr) {
  const std::size_t C = CC ? CC : g.c, hw = g.h * g.w;
  const bool nhwc = g.fmt == DataFormat::NHWC;
  if constexpr (CC != 0) {  // NHWC with C known: the row loop without branches, constants in registers
#pragma omp parallel
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const std::size_t rows = g.n * hw, r0 = share(rows, t, nt), r1 = share(rows, t + 1, nt);
      float ac[CC], bc[CC], dc[CC], mc[CC], ra[CC], rb[CC], tmp[CC];
      for (std::size_t c = 0; c < C; ++c) {
        ac[c] = A[c];
        bc[c] = B[c];
        dc[c] = D[c];
        mc[c] = mean[c];
        ra[c] = relu_ab ? relu_ab[c] : 0.f;
        rb[c] = relu_ab ? relu_ab[C + c] : 0.f;
      }
      for (std::size_t r = r0; r < r1; ++r) {
        ahead(x + r * C);
        ahead(dy + r * C);
        input_gradient_row<CC>(C, x + r * C, dy + r * C, relu_ab ? ra : nullptr, rb, mc, ac, bc, dc,
                               dx_bf16 ? tmp : dx + r * C);
        if (dx_bf16) host::store_bf16(tmp, dx_bf16 + r * C, CC);
      }
    }
    return;
  }
  constexpr std::size_t kBlock = 256;  // floats per bf16 block
  const std::ptrdiff_t units = std::ptrdiff_t(nhwc ? g.n * hw : g.n * C);
#pragma omp parallel for schedule(static)
  for (std::size_t u = 0; u < std::size_t(units); ++u) {
    const std::size_t len = nhwc ? C : hw, base = u * len;
    float tmp[kBlock];
    // [o, o + n) of the unit, into dx or through tmp into dx_bf16.
    for (std::size_t o = 0; o < len; o += dx_bf16 ? kBlock : len) {
      const std::size_t n = dx_bf16 ? std::min(kBlock, len - o) : len, at = base + o;
      float* out = dx_bf16 ? tmp : dx + at;
      if (nhwc) {
        input_gradient_row<0>(n, x + at, dy + at, relu_ab ? relu_ab + o : nullptr,
                              relu_ab ? relu_ab + C + o : nullptr, mean + o, A + o, B + o, D + o, out);
      } else {
        const std::size_t c = u % C;
        const float ac = A[c], bc = B[c], dc = D[c], mc = mean[c];
        const float ra = relu_ab ? relu_ab[c] : 0.f, rb = relu_ab ? relu_ab[C + c] : 0.f;
#pragma omp simd
        for (std::size_t i = 0; i < n; ++i) {
          const float xv = widen(x[at + i]);
          const float d = relu_ab ? widen(dy[at + i]) * relu_on(xv, ra, rb) : widen(dy[at + i]);
          out[i] = ac * d + bc * (xv - mc) + dc;
        }
      }
      if (dx_bf16) host::store_bf16(tmp, dx_bf16 + at, n);
    }
  }
}

/// The most channels of an NHWC row whose GELU affine_gelu forms in a
/// buffer of its own when y is not written (bf16_only's largest count).
inline constexpr std::size_t kGeluRowMax = 256;

/// y[i] = gelu(x[i] a[c] + b[c]) (the fused GELU's forward), parallel over
/// rows (NHWC) or planes (NCHW); with `y_bf16`, each row or plane of y also
/// as bfloat16 bits there, while it is in cache (a bf16 convolution's input).
/// With y null (NHWC rows of at most kGeluRowMax channels, y_bf16 given),
/// each row is formed in a buffer on the stack and written only as its
/// bits: the same bits, 4 bytes an element less to write.
/// Whether input_gradient_into_weight_gradient takes a convolution of
/// `cin` input channels in front of a batch norm of `c` channels over
/// `g`: a CPU build with AVX-512, NHWC, 16 output channels (one AVX-512
/// register a pixel), 1 to 4 input channels (ResNet's stem: 3), and an
/// image width up to 512.
inline bool wgrad_in_input_gradient(const ChannelGeom& g, std::size_t cin) {
#if defined(__AVX512F__)
  return g.fmt == DataFormat::NHWC && g.c == 16 && cin >= 1 && cin <= 4 && g.w >= 1 && g.w <= 512 && g.h >= 1;
#else
  (void)g, (void)cin;
  return false;
#endif
}

#if defined(__AVX512F__)
/// input_gradient's dx of a 16-channel NHWC batch norm (A, B, D from
/// gradient_coefficients; x float or bf16 bits, dy float or bits, the
/// fused ReLU's a, b or null), never stored: each image row of it goes
/// through a float block on the stack into the weight gradient of the 3x3,
/// stride-1, padding-1 convolution in front of the batch norm, whose input
/// `cx` (NHWC float, CIN channels, the batch norm's n, h, w) is read from a
/// zero-padded copy of each image:
///   dw[i][j][c][o] = sum over n, y, x of dx[n][y][x][o] cx[n][y+i-1][x+j-1][c]
/// (HWIO, float; 9 CIN sums of 16 lanes, in registers over an image). Each
/// image's sums go to its own float partial (`part`, n * 9 * CIN * 16), which
/// are added in image order: the same bits for any thread count. The float
/// products of dx times x where a tap falls on the padding are 0 (as
/// oneDNN's), unless dx is infinite or NaN there (then NaN).
template <std::size_t CIN, class X, class DY>
void input_gradient_into_weight_gradient(const ChannelGeom& g, const X* __restrict x, const DY* __restrict dy,
                                         const float* __restrict relu_ab, const float* __restrict mean,
                                         const float* __restrict A, const float* __restrict B,
                                         const float* __restrict D, const float* __restrict cx,
                                         std::vector<float>& part, std::vector<float>& pads,
                                         float* __restrict dw) {
  constexpr std::size_t C = 16, K = 9 * CIN;
  const std::size_t H = g.h, W = g.w, PW = W + 2, hw = H * W, pad_size = (H + 2) * PW * CIN;
  const int threads = std::max(1, omp_get_max_threads());
  part.resize(g.n * K * C);  // each image stores its whole partial below: no zeroing pass
  pads.resize(std::size_t(threads) * pad_size);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::size_t i0 = share(g.n, t, nt), i1 = share(g.n, t + 1, nt);
    float ac[C], bc[C], dc[C], mc[C], ra[C], rb[C];
    for (std::size_t c = 0; c < C; ++c) {
      ac[c] = A[c];
      bc[c] = B[c];
      dc[c] = D[c];
      mc[c] = mean[c];
      ra[c] = relu_ab ? relu_ab[c] : 0.f;
      rb[c] = relu_ab ? relu_ab[C + c] : 0.f;
    }
    float* pad = pads.data() + std::size_t(t) * pad_size;  // the image, zero-padded by one pixel
    // its border zeroed (each image below fills the inside): the top and
    // bottom rows, the left and right columns
    std::fill(pad, pad + PW * CIN, 0.f);
    std::fill(pad + (H + 1) * PW * CIN, pad + pad_size, 0.f);
    for (std::size_t y = 1; y <= H; ++y) {
      std::fill(pad + y * PW * CIN, pad + (y * PW + 1) * CIN, 0.f);
      std::fill(pad + (y * PW + W + 1) * CIN, pad + (y + 1) * PW * CIN, 0.f);
    }
    alignas(64) float row[512 * C];  // one image row of dx
    for (std::size_t n = i0; n < i1; ++n) {
      for (std::size_t y = 0; y < H; ++y)
        std::memcpy(&pad[((y + 1) * PW + 1) * CIN], cx + (n * hw + y * W) * CIN, W * CIN * sizeof(float));
      __m512 acc[K];
      for (std::size_t k = 0; k < K; ++k) acc[k] = _mm512_setzero_ps();
      for (std::size_t y = 0; y < H; ++y) {
        const std::size_t r0 = n * hw + y * W;
        for (std::size_t xi = 0; xi < W; ++xi) {
          ahead(x + (r0 + xi) * C);
          ahead(dy + (r0 + xi) * C);
          input_gradient_row<C>(C, x + (r0 + xi) * C, dy + (r0 + xi) * C, relu_ab ? ra : nullptr, rb, mc, ac,
                                bc, dc, row + xi * C);
        }
        for (std::size_t xi = 0; xi < W; ++xi) {
          const __m512 d = _mm512_load_ps(row + xi * C);
          const float* p = &pad[(y * PW + xi) * CIN];  // tap (0, 0) of output pixel (y, xi)
          // Opaque to the optimizer: each tap is a broadcast operand of its
          // multiply-add. (GCC otherwise carries the taps shared with the
          // next pixel over in registers it then spills: 1.4x slower.)
          asm("" : "+r"(p));
#pragma GCC unroll 3
          for (std::size_t i = 0; i < 3; ++i)
#pragma GCC unroll 3
            for (std::size_t j = 0; j < 3; ++j)
#pragma GCC unroll 4
              for (std::size_t c = 0; c < CIN; ++c)
                acc[(i * 3 + j) * CIN + c] =
                    _mm512_fmadd_ps(_mm512_set1_ps(p[(i * PW + j) * CIN + c]), d, acc[(i * 3 + j) * CIN + c]);
        }
      }
      for (std::size_t k = 0; k < K; ++k) _mm512_storeu_ps(&part[(n * K + k) * C], acc[k]);
    }
  }
  // dw in HWIO: [i][j][c][o], the partials' order (i * 3 + j) * CIN + c.
  for (std::size_t k = 0; k < K * C; ++k) {
    double s = 0.0;
    for (std::size_t n = 0; n < g.n; ++n) s += double(part[n * K * C + k]);
    dw[k] = float(s);
  }
}
#endif

template <class X>
inline void affine_gelu(const ChannelGeom& g, const X* x, const float* a, const float* b, float* y,
                        std::uint16_t* y_bf16 = nullptr) {
  const std::size_t C = g.c, hw = g.h * g.w;
  const bool nhwc = g.fmt == DataFormat::NHWC;
  const std::ptrdiff_t units = std::ptrdiff_t(nhwc ? g.n * hw : g.n * C);
  const std::size_t len = nhwc ? C : hw;
  constexpr bool kFloat = std::is_same_v<X, float>;
  if ((!y && !(nhwc && y_bf16 && C <= kGeluRowMax)) || (!kFloat && !(nhwc && C <= kGeluRowMax)))
    throw std::logic_error(
        "bn::affine_gelu: y null, or x as bf16 bits, without NHWC rows of at most 256 channels (and bits)");
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t u = 0; u < units; ++u) {
    const std::size_t base = std::size_t(u) * len;
    const float* xs = nullptr;
    alignas(64) float wide[kFloat ? 1 : kGeluRowMax];  // x as bf16 bits, widened first
    if constexpr (kFloat) {
      xs = x + base;
    } else {
#pragma omp simd
      for (std::size_t c = 0; c < len; ++c) wide[c] = widen(x[base + c]);
      xs = wide;
    }
    if (!y) {
      alignas(64) float row[kGeluRowMax];
      gelu::value_row(len, xs, a, b, row);
      host::store_bf16(row, y_bf16 + base, len);
      continue;
    }
    if (nhwc) {
      gelu::value_row(len, xs, a, b, y + base);
    } else {
      const std::size_t c = std::size_t(u) % C;
      gelu::value_plane(len, xs, a[c], b[c], y + base);
    }
    if (y_bf16) host::store_bf16(y + base, y_bf16 + base, len);
  }
}

/// Whether affine() and forward_train() can write the bf16 copy alone (y ==
/// nullptr with y_bf16): the NHWC channel counts with_channels specialises.
inline bool bf16_only(const ChannelGeom& g) {
  return g.fmt == DataFormat::NHWC && (g.c == 16 || g.c == 32 || g.c == 64 || g.c == 256);
}

/// Whether affine_sum() (forward_train with a sum) can write the ReLU mask
/// bits: the same NHWC channel counts, each a multiple of 16.
inline bool sum_mask(const ChannelGeom& g) { return bf16_only(g); }

/// f(std::integral_constant<std::size_t, C>) with C = the channel count when
/// it is one of ResNet's (16, 32, 64) or airbench's (64, 256) and the layout
/// is NHWC, so the per-row loops have a trip count known at compile time;
/// else C = 0 (any). (256: the generic loop made airbench's BN backward
/// 1.6x slower.)
template <class F>
void with_channels(const ChannelGeom& g, F&& f) {
  if (g.fmt == DataFormat::NHWC) {
    if (g.c == 16) return f(std::integral_constant<std::size_t, 16>{});
    if (g.c == 32) return f(std::integral_constant<std::size_t, 32>{});
    if (g.c == 64) return f(std::integral_constant<std::size_t, 64>{});
    if (g.c == 256) return f(std::integral_constant<std::size_t, 256>{});
  }
  f(std::integral_constant<std::size_t, 0>{});
}

/// Offset of the first element of channel c (the shift of its sums).
inline std::size_t first_of_channel(const ChannelGeom& g, std::size_t c) {
  return g.fmt == DataFormat::NHWC ? c : c * g.h * g.w;
}

/// Training forward: the batch mean and biased variance of each channel
/// (sums of x - x0 and (x - x0)^2, x0 the channel's first value), then
/// y = x * a + b with a = gamma / sqrt(var + eps), b = beta - mean * a; with
/// `relu_ab` (2C floats), y = max(y, 0) and a, b are kept there for the
/// backward, which recomputes the mask from them (relu_on); with `gelu_ab`,
/// y = gelu(x * a + b) and a, b are kept there for the backward; with `sum`
/// (no activation of its own), y = x * a + b + sum (then max(., 0) with
/// `sum_relu`): a residual branch added in the same pass (affine_sum; sum
/// float or bf16 bits), with `sum_mask_bits` its ReLU mask as bits too
/// (sum_mask(g) must hold). With
/// `y_bf16`, y is also written there as bfloat16 bits
/// (host::store_bf16), in the same pass: the input of a bf16 convolution.
/// With `given` (2C: the means, then the biased variances, in double), the
/// statistics are those and there is no pass over x for them: the
/// convolution that wrote x took them in its own kernels' epilogue
/// (direct_conv.hpp, forward_images). With `coefficients_only`, y is not
/// written: the statistics and the coefficients (into relu_ab with the
/// ReLU) alone, for a convolution that normalises each image itself
/// (ops::BnNormMap).
template <class X, class R = float>
void forward_train(const ChannelGeom& g, double eps, const X* x, const float* gamma, const float* beta,
                   float* y, float* mean, float* var, float* relu_ab, Scratch& sc, float* gelu_ab = nullptr,
                   const R* sum = nullptr, bool sum_relu = false, std::uint16_t* y_bf16 = nullptr,
                   std::uint16_t* sum_mask_bits = nullptr, const double* given = nullptr,
                   bool coefficients_only = false) {
  const std::size_t C = g.c;
  const double m = double(g.n * g.h * g.w);
  sc.coef.resize(3 * C);
  float *shift = sc.coef.data(), *a = shift + C, *b = a + C;
  if (given) {  // the statistics taken by the convolution that wrote x (direct_conv.hpp)
    for (std::size_t c = 0; c < C; ++c) {
      const double mu = given[c], v = std::max(0.0, given[C + c]);
      mean[c] = float(mu);
      var[c] = float(v);
      scale_shift(double(gamma[c]), double(beta[c]), mu, v, eps, a[c], b[c]);
    }
  } else {
    for (std::size_t c = 0; c < C; ++c) shift[c] = widen(x[first_of_channel(g, c)]);
    with_channels(g, [&](auto cc) {
      channel_sums<SumKind::Stats, decltype(cc)::value>(g, x, nullptr, nullptr, shift, sc);
    });
    const std::vector<double>& sums = sc.sums;
    for (std::size_t c = 0; c < C; ++c) {
      const double d = sums[c] / m, mu = double(shift[c]) + d, v = std::max(0.0, sums[C + c] / m - d * d);
      mean[c] = float(mu);
      var[c] = float(v);
      scale_shift(double(gamma[c]), double(beta[c]), mu, v, eps, a[c], b[c]);
    }
  }
  if (relu_ab) {
    std::copy(a, a + C, relu_ab);
    std::copy(b, b + C, relu_ab + C);
  }
  if (coefficients_only) return;  // y not written (a deferred output: ops::BnNormMap)
  if (gelu_ab) {
    std::copy(a, a + C, gelu_ab);
    std::copy(b, b + C, gelu_ab + C);
    affine_gelu(g, x, a, b, y, y_bf16);
    return;
  }
  if (sum) {
    with_channels(g, [&](auto cc) {
      affine_sum<decltype(cc)::value>(g, x, a, b, sum, sum_relu, y, y_bf16, sum_mask_bits);
    });
    return;
  }
  with_channels(g, [&](auto cc) { affine<decltype(cc)::value>(g, x, a, b, y, relu_ab != nullptr, y_bf16); });
}

/// backward()'s second pass as a map of its inputs, for a caller that
/// applies it to an image at a time itself (input_gradient_row on each
/// row: a convolution's prologue, direct_conv.hpp): dx = A dyr + B (x -
/// mean) + D per channel, dyr = dy (or dy where x a + b > 0 with relu_ab,
/// a then b, C each: the fused ReLU's mask).
struct GradMap {
  const float* x = nullptr;
  const float* dy = nullptr;
  const float* relu_ab = nullptr;
  const float* mean = nullptr;
  const float* A = nullptr;
  const float* B = nullptr;
  const float* D = nullptr;
};

/// What a convolution's own backward kernels do to each image of the input
/// gradient they have just computed, while it is in cache (direct_conv.hpp,
/// ConvBatchNorm); every pointer at the range's first image:
/// - a residual block's sum of that gradient (RunContext::grad_sum), in
///   place: dx = dx + other, through the ReLU's mask given as bits
///   (`mask_bits`, the word of the range's first element) or as the ReLU's
///   output (`mask_relu` > 0), or no mask — the float operations of
///   Eltwise::add / add_masked / add_masked_bits, so the same bits;
/// - then the backward sums of the batch norm whose output (or a residual
///   sum of it) the convolution read, with the final dx as that batch
///   norm's dy: `x` its input, `relu_ab` its fused ReLU's a then b (or
///   null), `mean` its batch mean (the shift of backward_sums): sums[c] =
///   Σ dyr and sums[C + c] = Σ dyr (x − mean), dyr = dy through the ReLU's
///   mask, added into `sums` (2C; a call's images as backward_sums' float
///   blocks of 16 rows added into double, image by image on each thread,
///   the threads' totals in thread order, then added: the result depends on
///   the thread count and the ranges only; the double additions come in
///   another order than channel_sums', so the last bits may differ).
struct GradEpilogue {
  const float* other = nullptr;
  const std::uint16_t* mask_bits = nullptr;
  const float* mask_relu = nullptr;
  const float* x = nullptr;
  const float* relu_ab = nullptr;
  const float* mean = nullptr;
  double* sums = nullptr;
};

/// dbeta, dgamma and backward()'s coefficients A, B, D (into sc.coef) from
/// the sums of its first pass (sc.sums).
inline void gradient_coefficients(const ChannelGeom& g, double eps, const float* gamma, const float* var,
                                  float* dgamma, float* dbeta, Scratch& sc) {
  const std::size_t C = g.c;
  const double m = double(g.n * g.h * g.w);
  const std::vector<double>& sums = sc.sums;
  sc.coef.resize(3 * C);
  float *A = sc.coef.data(), *B = A + C, *D = B + C;
  for (std::size_t c = 0; c < C; ++c) {
    const double inv = 1.0 / std::sqrt(double(var[c]) + eps), sdy = sums[c], dg = sums[C + c] * inv;
    dbeta[c] = float(sdy);
    dgamma[c] = float(dg);
    const double a = double(gamma[c]) * inv;
    A[c] = float(a);
    B[c] = float(-a * inv * dg / m);
    D[c] = float(-a * sdy / m);
  }
}

/// The backward's first pass alone: dgamma, dbeta and the per-element
/// coefficients A, B, D (into sc.coef) of backward() below, which
/// input_gradient_images then applies to a range of images at a time
/// (ConvBatchNorm: each range of dx handed to the convolution's backward
/// while it is in cache). No GELU.
template <class X, class DY>
void backward_sums(const ChannelGeom& g, double eps, const X* x, const DY* dy, const float* gamma,
                   const float* mean, const float* var, float* dgamma, float* dbeta, const float* relu_ab,
                   Scratch& sc) {
  with_channels(g, [&](auto cc) {
    channel_sums<SumKind::Grad, decltype(cc)::value, X, DY>(g, x, dy, relu_ab, mean, sc, nullptr);
  });
  gradient_coefficients(g, eps, gamma, var, dgamma, dbeta, sc);
}
/// backward_sums with its sums already taken elsewhere (2C: a
/// GradEpilogue's, over the same x, dy and mean): dgamma, dbeta and the
/// coefficients.
inline void backward_sums_given(const ChannelGeom& g, double eps, const double* sums, const float* gamma,
                                const float* var, float* dgamma, float* dbeta, Scratch& sc) {
  sc.sums.assign(sums, sums + 2 * g.c);
  gradient_coefficients(g, eps, gamma, var, dgamma, dbeta, sc);
}
/// dx of images [i0, i1) (backward()'s second pass over them) into
/// `dx_images` (their size), from the coefficients of backward_sums.
template <class X, class DY>
void input_gradient_images(const ChannelGeom& g, const X* x, const DY* dy, const float* relu_ab,
                           const float* mean, const Scratch& sc, std::size_t i0, std::size_t i1,
                           float* dx_images) {
  const std::size_t C = g.c, off = i0 * g.h * g.w * C;
  const float *A = sc.coef.data(), *B = A + C, *D = B + C;
  ChannelGeom part = g;
  part.n = i1 - i0;
  with_channels(part, [&](auto cc) {
    input_gradient<decltype(cc)::value>(part, x + off, dy + off, relu_ab, mean, A, B, D, dx_images);
  });
}

/// Backward of the training forward, given its batch statistics: with
/// inv = 1/sqrt(var + eps), xhat = (x - mean) inv and dyr = dy (or dy where
/// x a + b > 0 with the fused ReLU, whose a, b the forward kept in
/// `relu_ab`; dy gelu'(x a + b) with the fused GELU, whose
/// a, b the forward kept in `gelu_ab`):
///   dbeta = sum dyr, dgamma = inv * sum dyr (x - mean)
///   dx = gamma inv / m * (m dyr - dbeta - xhat dgamma)
/// evaluated per element as A dyr + B (x - mean) + D with per-channel A, B, D.
/// The GELU's dyr is computed once, in the pass of the sums, into dx, which
/// the second pass then overwrites in place. With `dx_bf16`, dx goes there
/// as bfloat16 and dx is not touched (with the GELU it holds dyr). dy is float, or
/// (not with the GELU) bfloat16 bits: the bf16 input gradient of the
/// convolution after this batch norm, widened exactly (widen). With
/// `given_sums` (2C, not with the GELU: sum_into_dy_with_sums' over the
/// same x, dy and mean), no pass of the sums.
template <class X, class DY>
void backward(const ChannelGeom& g, double eps, const X* x, const DY* dy, const float* gamma,
              const float* mean, const float* var, float* dx, float* dgamma, float* dbeta,
              const float* relu_ab, Scratch& sc, const float* gelu_ab = nullptr,
              std::uint16_t* dx_bf16 = nullptr, const double* given_sums = nullptr) {
  const std::size_t C = g.c;
  const GeluGrad gg{gelu_ab, gelu_ab ? gelu_ab + C : nullptr, dx};
  if (given_sums && !gelu_ab) {  // taken with dy's sum (sum_into_dy_with_sums)
    sc.sums.assign(given_sums, given_sums + 2 * C);
  } else {
    with_channels(g, [&](auto cc) {
      channel_sums<SumKind::Grad, decltype(cc)::value, X, DY>(g, x, dy, relu_ab, mean, sc,
                                                              gelu_ab ? &gg : nullptr);
    });
  }
  if constexpr (std::is_same_v<DY, float>) {
    if (gelu_ab) dy = dx;  // dyr, stored by the sums' pass
  }
  gradient_coefficients(g, eps, gamma, var, dgamma, dbeta, sc);
  const float *A = sc.coef.data(), *B = A + C, *D = B + C;
  with_channels(g, [&](auto cc) {
    input_gradient<decltype(cc)::value>(g, x, dy, relu_ab, mean, A, B, D, dx, dx_bf16);
  });
}

#if defined(__AVX512F__)
/// backward() with dx not stored: it is the output gradient of the 3x3
/// stride-1 padding-1 convolution in front of the batch norm, whose weight
/// gradient dw (HWIO, cin x 16) is computed from that convolution's float
/// NHWC input `cx` in the pass of dx (input_gradient_into_weight_gradient;
/// wgrad_in_input_gradient(g, cin) must hold). `given_sums` as backward's.
template <class X, class DY>
void backward_into_weight_gradient(const ChannelGeom& g, double eps, const X* x, const DY* dy,
                                   const float* gamma, const float* mean, const float* var, float* dgamma,
                                   float* dbeta, const float* relu_ab, Scratch& sc, const float* cx,
                                   std::size_t cin, float* dw, const double* given_sums = nullptr) {
  if (given_sums)
    sc.sums.assign(given_sums, given_sums + 2 * g.c);
  else
    channel_sums<SumKind::Grad, 16, X, DY>(g, x, dy, relu_ab, mean, sc, nullptr);
  gradient_coefficients(g, eps, gamma, var, dgamma, dbeta, sc);
  const float *A = sc.coef.data(), *B = A + g.c, *D = B + g.c;
  auto run = [&](auto k) {
    input_gradient_into_weight_gradient<decltype(k)::value>(g, x, dy, relu_ab, mean, A, B, D, cx, sc.wpart,
                                                            sc.wpad, dw);
  };
  switch (cin) {
    case 1:
      return run(std::integral_constant<std::size_t, 1>{});
    case 2:
      return run(std::integral_constant<std::size_t, 2>{});
    case 3:
      return run(std::integral_constant<std::size_t, 3>{});
    case 4:
      return run(std::integral_constant<std::size_t, 4>{});
    default:
      throw std::logic_error("bn::backward_into_weight_gradient: 1 to 4 input channels");
  }
}
#endif

}  // namespace bn
}  // namespace onednn
}  // namespace backend
}  // namespace cifarnet
