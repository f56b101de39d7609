// cifarnet/backend/reference/gemm.hpp — row-major matrix products through
// xtensor-blas (xt::linalg::dot: any BLAS scalar, so double for the
// gradient checks). run_bf16: the same with A and B rounded to bfloat16
// first (the oneDNN backend's bf16 product, computed in T).
#pragma once

#include <xtensor-blas/xlinalg.hpp>
#include <xtensor/xadapt.hpp>

#include <array>
#include <cstddef>
#include <vector>

#include "cifarnet/backend/host/bf16.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct Gemm<backend::Reference, T> {
  using Dev = Device<backend::Reference>;
  void run(Dev&, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
           const T* b, T beta, T* c) {
    const auto A = adapt(a, ta ? k : m, ta ? m : k);
    const auto Bm = adapt(b, tb ? n : k, tb ? k : n);
    xt::xtensor<T, 2> prod;
    if (ta && tb)
      prod = xt::linalg::dot(xt::transpose(A), xt::transpose(Bm));
    else if (ta)
      prod = xt::linalg::dot(xt::transpose(A), Bm);
    else if (tb)
      prod = xt::linalg::dot(A, xt::transpose(Bm));
    else
      prod = xt::linalg::dot(A, Bm);
    const T* p = prod.data();
    for (std::size_t i = 0; i < m * n; ++i) c[i] = alpha * p[i] + (beta == T(0) ? T(0) : beta * c[i]);
  }

  /// run() of A and B each rounded to the nearest bfloat16 (via float);
  /// `reuse` (oneDNN's reuse of the last call's rounding) changes nothing here.
  void run_bf16(Dev& dev, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                const T* b, T beta, T* c, bool /*reuse*/ = false) {
    std::vector<T> ra(a, a + m * k), rb(b, b + k * n);
    for (T& v : ra) v = T(backend::host::round_to_bf16(float(v)));
    for (T& v : rb) v = T(backend::host::round_to_bf16(float(v)));
    run(dev, ta, tb, m, n, k, alpha, ra.data(), rb.data(), beta, c);
  }

 private:
  static auto adapt(const T* p, std::size_t r, std::size_t cols) {
    return xt::adapt(p, r * cols, xt::no_ownership(), std::array<std::size_t, 2>{r, cols});
  }
};

}  // namespace ops
}  // namespace cifarnet
