// cifarnet/vision/losses.hpp — the Gatys et al. losses of the style transfer
// seed, exactly as TF_SEMANTICS.md §6 states them, with their gradients:
//
//   content  L = Σ(F − P)² / (4·size(P))              dL/dF = (F − P) / (2·size(P))
//   Gram     G = FᵀF, F reshaped to (M = H·W, N = channels)
//   style    E = Σ(G − A)² / (2·N·M)²                  dE/dF = 4·F(G − A) / (2·N·M)²
//   TV       Σ|x[y+1,x] − x[y,x]| + Σ|x[y,x+1] − x[y,x]| (tf.image.total_variation)
//
// F and P are one example's activations (batch 1) in the network's data
// format; A is the style image's Gram matrix. Losses are summed in double;
// gradients are ADDED, scaled, into a caller's buffer (several losses share
// a tap's gradient), or with `add` false written there (a tap's first).
// Matrix products go through the backend's ops::Gemm: xtensor-blas on the
// reference backend (any BLAS scalar), dnnl_sgemm on oneDNN, cuBLAS on
// CUDA. With ConvPrecision::BF16 the per-step products (G and dE/dF) take
// their factors rounded to bfloat16 and sum in float (Gemm::run_bf16:
// oneDNN's bf16 matmul, as PyTorch's bf16 autocast does for torch.mm); a
// backend without run_bf16 (CUDA) stays in float. NUMERICS.md states the
// measured error.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "cifarnet/backend/reference/gemm.hpp"
#include "cifarnet/backend/tags.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/ops/conv_algorithm.hpp"

namespace cifarnet::vision {

namespace detail {
/// ops::Gemm<B, T> on `dev` (the model's device: GatysLoss passes it), or
/// when null on this thread's own default device of backend B (made once per
/// thread on first use: for CUDA the process's GPU, Device<Cuda>()).
template <class Op, class = void>
struct HasBf16Gemm : std::false_type {};
template <class Op>
struct HasBf16Gemm<Op, std::void_t<decltype(&Op::run_bf16)>> : std::true_type {};

template <class B, class T>
void gemm(Device<B>* dev, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
          const T* b, T beta, T* c, ConvPrecision prec = ConvPrecision::F32, bool reuse = false) {
  thread_local ops::Gemm<B, T> op;  // keeps only per-geometry caches
  auto call = [&](Device<B>& d) {
    if constexpr (HasBf16Gemm<ops::Gemm<B, T>>::value)
      if (prec == ConvPrecision::BF16) return op.run_bf16(d, ta, tb, m, n, k, alpha, a, b, beta, c, reuse);
    op.run(d, ta, tb, m, n, k, alpha, a, b, beta, c);
  };
  if (dev) return call(*dev);
  thread_local Device<B> own;
  call(own);
}
}  // namespace detail

/// (M, N) of one example's activation: M = H·W positions, N = channels.
inline std::array<std::size_t, 2> gram_dims(const Shape& s) { return {s.h * s.w, s.c}; }

namespace detail {
template <class T>
Shape single_example(const Tensor<T>& f, DataFormat fmt, const char* what) {
  if (f.dimension() != 4 || f.size() == 0)
    throw ShapeError(cifarnet::detail::concat(what, ": empty activation"));
  const Shape s = shape_of(f, fmt);
  if (s.n != 1)
    throw ShapeError(cifarnet::detail::concat(what, ": expects one example (batch 1), got ", s.str()));
  return s;
}
}  // namespace detail

/// G = FᵀF (N x N, row-major) of one example's activation in format `fmt`,
/// computed on `dev` (null: the thread's default device of B), with F
/// rounded to bfloat16 when `prec` is BF16 (see the file comment).
template <class B, class T>
void gram_matrix(const Tensor<T>& f, DataFormat fmt, std::vector<T>& g, Device<B>* dev = nullptr,
                 ConvPrecision prec = ConvPrecision::F32) {
  const Shape s = detail::single_example(f, fmt, "gram_matrix");
  const auto [M, N] = gram_dims(s);
  g.resize(N * N);
  // NHWC stores F as (M, N): G = FᵀF. NCHW stores Fᵀ as (N, M): G = Fᵀ(Fᵀ)ᵀ.
  if (fmt == DataFormat::NHWC)
    detail::gemm<B, T>(dev, true, false, N, N, M, T(1), f.data(), f.data(), T(0), g.data(), prec);
  else
    detail::gemm<B, T>(dev, false, true, N, N, M, T(1), f.data(), f.data(), T(0), g.data(), prec);
}

/// A style target: the style image's Gram matrix at one layer, with the
/// layer's M and N.
template <class T>
struct GramTarget {
  std::size_t m = 0, n = 0;
  std::vector<T> a;  ///< N x N
};

template <class B, class T>
GramTarget<T> make_gram_target(const Tensor<T>& f, DataFormat fmt, Device<B>* dev = nullptr) {
  GramTarget<T> t;
  gram_matrix<B>(f, fmt, t.a, dev);
  const auto d = gram_dims(shape_of(f, fmt));
  t.m = d[0];
  t.n = d[1];
  return t;
}

/// Content loss Σ(F − P)² / (4·size(P)). With `df`, adds scale·dL/dF =
/// scale·(F − P) / (2·size(P)) into it (same shape as F); with `add` false
/// writes it there instead (the tap's first loss: no zeroing pass first).
template <class T>
double content_loss(const Tensor<T>& f, const Tensor<T>& p, T* df = nullptr, double scale = 1.0,
                    bool add = true) {
  if (f.shape() != p.shape())
    throw ShapeError("content_loss: the activation and the content target differ in shape");
  const std::size_t size = p.size();
  if (size == 0) throw ShapeError("content_loss: empty activation");
  const T* pf = f.data();
  const T* pp = p.data();
  double sum = 0;
  for (std::size_t i = 0; i < size; ++i) {
    const double d = double(pf[i]) - double(pp[i]);
    sum += d * d;
  }
  if (df) {
    const T k = T(scale / (2.0 * double(size)));
    if (add)
      for (std::size_t i = 0; i < size; ++i) df[i] += k * (pf[i] - pp[i]);
    else
      for (std::size_t i = 0; i < size; ++i) df[i] = k * (pf[i] - pp[i]);
  }
  return sum / (4.0 * double(size));
}

/// One layer's style loss E = Σ(G − A)² / (2·N·M)² with G = FᵀF. With `df`,
/// adds scale·dE/dF = scale·4·F(G − A) / (2·N·M)² into it (`add` false:
/// writes it there, as content_loss). `work` is scratch
/// space (N x N), kept by the caller so steady-state steps do not allocate.
/// Products run on `dev` (null: the thread's default device of B), in
/// bfloat16 when `prec` is BF16 (the file comment; A stays as given).
template <class B, class T>
double style_layer_loss(const Tensor<T>& f, DataFormat fmt, const GramTarget<T>& target, std::vector<T>& work,
                        T* df = nullptr, double scale = 1.0, Device<B>* dev = nullptr,
                        ConvPrecision prec = ConvPrecision::F32, bool add = true) {
  const Shape s = detail::single_example(f, fmt, "style_layer_loss");
  const auto [M, N] = gram_dims(s);
  if (M != target.m || N != target.n || target.a.size() != N * N)
    throw ShapeError(cifarnet::detail::concat("style_layer_loss: the activation has M = ", M, ", N = ", N,
                                              " but the style target has M = ", target.m,
                                              ", N = ", target.n));
  gram_matrix<B>(f, fmt, work, dev, prec);
  const double denom = 2.0 * double(N) * double(M);
  double sum = 0;
  for (std::size_t i = 0; i < N * N; ++i) {
    work[i] -= target.a[i];  // work = G − A (symmetric)
    sum += double(work[i]) * double(work[i]);
  }
  if (df) {  // (F as the Gram product just above rounded it: reused; G − A rounded afresh)
    const T alpha = T(scale * 4.0 / (denom * denom));
    if (fmt == DataFormat::NHWC)  // dF (M x N) += alpha·F (M x N)·(G − A)
      detail::gemm<B, T>(dev, false, false, M, N, N, alpha, f.data(), work.data(), T(add), df, prec, true);
    else  // dFᵀ (N x M) += alpha·(G − A)·Fᵀ
      detail::gemm<B, T>(dev, false, false, N, M, N, alpha, work.data(), f.data(), T(add), df, prec, true);
  }
  return sum / (denom * denom);
}

/// tf.image.total_variation of one HWC image (h, w, c): the sum of absolute
/// differences between vertical and horizontal neighbours. With `dx`, adds
/// scale·dTV/dx (a subgradient: sign of each difference, 0 where it is 0).
template <class T>
double total_variation(const T* x, std::size_t h, std::size_t w, std::size_t c, T* dx = nullptr,
                       double scale = 1.0) {
  double sum = 0;
  const T k = T(scale);
  auto pair = [&](std::size_t a, std::size_t b) {  // d = x[b] − x[a]
    const T d = x[b] - x[a];
    sum += std::fabs(double(d));
    if (dx && d != T(0)) {
      const T g = d > T(0) ? k : -k;
      dx[b] += g;
      dx[a] -= g;
    }
  };
  for (std::size_t y = 0; y < h; ++y)
    for (std::size_t xx = 0; xx < w; ++xx)
      for (std::size_t ch = 0; ch < c; ++ch) {
        const std::size_t i = (y * w + xx) * c + ch;
        if (y + 1 < h) pair(i, i + w * c);
        if (xx + 1 < w) pair(i, i + c);
      }
  return sum;
}

}  // namespace cifarnet::vision
