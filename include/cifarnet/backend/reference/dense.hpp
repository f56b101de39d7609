// cifarnet/backend/reference/dense.hpp — fully connected layer through
// xtensor-blas (xt::linalg::dot, BLAS-backed): y = x·W + b with W (in, out).
#pragma once

#include <xtensor-blas/xlinalg.hpp>
#include <xtensor/xadapt.hpp>

#include <algorithm>
#include <array>

#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct Dense<backend::Reference, T> {
  using Dev = Device<backend::Reference>;

  void forward(Dev&, std::size_t n, std::size_t in, std::size_t out, const T* x, const T* w, const T* b,
               T* y) {
    const auto X = adapt(x, n, in);
    const auto W = adapt(w, in, out);
    xt::xtensor<T, 2> Y = xt::linalg::dot(X, W);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < out; ++j) y[i * out + j] = Y(i, j) + (b ? b[j] : T(0));
  }

  void backward_data(Dev&, std::size_t n, std::size_t in, std::size_t out, const T* dy, const T* w, T* dx) {
    xt::xtensor<T, 2> DX = xt::linalg::dot(adapt(dy, n, out), xt::transpose(adapt(w, in, out)));
    std::copy(DX.begin(), DX.end(), dx);
  }

  void backward_weights(Dev&, std::size_t n, std::size_t in, std::size_t out, const T* x, const T* dy, T* dw,
                        T* db) {
    xt::xtensor<T, 2> DW = xt::linalg::dot(xt::transpose(adapt(x, n, in)), adapt(dy, n, out));
    std::copy(DW.begin(), DW.end(), dw);
    if (db) {
      for (std::size_t j = 0; j < out; ++j) db[j] = 0;
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < out; ++j) db[j] += dy[i * out + j];
    }
  }

 private:
  static auto adapt(const T* p, std::size_t r, std::size_t c) {
    return xt::adapt(p, r * c, xt::no_ownership(), std::array<std::size_t, 2>{r, c});
  }
};

}  // namespace ops
}  // namespace cifarnet
