// cifarnet/backend/onednn/dense.hpp — fully connected layer through oneDNN's
// row-major dnnl_sgemm (float): y = x·W + b with x (n, in), W (in, out),
// y (n, out). backward_data: dx = dy·Wᵀ; backward_weights: dW = xᵀ·dy and
// db = column sums of dy (accumulated in double). dx, dW and db are
// overwritten. sgemm builds no primitive, so there is nothing to cache.
#pragma once

#include <dnnl.h>

#include <algorithm>
#include <vector>

#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

/// Dense layer on dnnl_sgemm (float).
template <>
struct Dense<backend::OneDnn, float> {
  using Dev = Device<backend::OneDnn>;

  /// y = x·W + b (b may be nullptr).
  void forward(Dev&, std::size_t n, std::size_t in, std::size_t out, const float* x, const float* w,
               const float* b, float* y) {
    static constexpr const char* op = "Dense forward";
    check(op, n, in, out);
    backend::onednn::require(op, {{x, "x"}, {w, "w"}, {y, "y"}});
    if (b)
      for (std::size_t i = 0; i < n; ++i) std::copy(b, b + out, y + i * out);
    gemm(op, 'N', 'N', n, out, in, x, in, w, out, b ? 1.f : 0.f, y, out);
  }

  /// dx = dy·Wᵀ.
  void backward_data(Dev&, std::size_t n, std::size_t in, std::size_t out, const float* dy, const float* w,
                     float* dx) {
    static constexpr const char* op = "Dense backward_data";
    check(op, n, in, out);
    backend::onednn::require(op, {{dy, "dy"}, {w, "w"}, {dx, "dx"}});
    gemm(op, 'N', 'T', n, in, out, dy, out, w, out, 0.f, dx, in);
  }

  /// dW = xᵀ·dy, db = sum over the batch of dy (db may be nullptr).
  void backward_weights(Dev&, std::size_t n, std::size_t in, std::size_t out, const float* x, const float* dy,
                        float* dw, float* db) {
    static constexpr const char* op = "Dense backward_weights";
    check(op, n, in, out);
    backend::onednn::require(op, {{x, "x"}, {dy, "dy"}, {dw, "dw"}});
    gemm(op, 'T', 'N', in, out, n, x, in, dy, out, 0.f, dw, out);
    if (db) {
      std::vector<double> acc(out, 0.0);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < out; ++j) acc[j] += double(dy[i * out + j]);
      for (std::size_t j = 0; j < out; ++j) db[j] = float(acc[j]);
    }
  }

 private:
  static void check(const char* op, std::size_t n, std::size_t in, std::size_t out) {
    if (n == 0 || in == 0 || out == 0)
      throw ShapeError(detail::concat(op, ": empty matrix (n=", n, ", in=", in, ", out=", out, ")"));
  }

  // Row-major C (m x nn) = op(A) (m x k) · op(B) (k x nn) + beta C.
  static void gemm(const char* op, char ta, char tb, std::size_t m, std::size_t nn, std::size_t k,
                   const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                   std::size_t ldc) {
    using backend::onednn::dim;
    const dnnl_status_t st =
        dnnl_sgemm(ta, tb, dim(m), dim(nn), dim(k), 1.f, a, dim(lda), b, dim(ldb), beta, c, dim(ldc));
    if (st != dnnl_success)
      throw BackendError(detail::concat("oneDNN ", op, ": dnnl_sgemm failed (status ",
                                        backend::onednn::status_name(st), " = ", int(st), ")"));
  }
};

}  // namespace ops
}  // namespace cifarnet
