// cifarnet/backend/onednn/dense.hpp — fully connected layer through
// ops::Gemm<OneDnn> (oneDNN's row-major dnnl_sgemm, float): y = x·W + b with x (n, in), W (in, out),
// y (n, out). backward_data: dx = dy·Wᵀ; backward_weights: dW = xᵀ·dy and
// db = column sums of dy (accumulated in double). dx, dW and db are
// overwritten. sgemm builds no primitive, so there is nothing to cache.
#pragma once

#include <algorithm>
#include <vector>

#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/backend/onednn/gemm.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

/// Dense layer on dnnl_sgemm (float).
template <class T>
struct Dense<backend::OneDnn, T> {
  CIFARNET_ONEDNN_FLOAT_ONLY(Dense, T);
  using Dev = Device<backend::OneDnn>;

  /// y = x·W + b (b may be nullptr).
  CIFARNET_OUTLINE void forward(Dev& dev, std::size_t n, std::size_t in, std::size_t out, const float* x,
                                const float* w, const float* b, float* y) {
    static constexpr const char* op = "Dense forward";
    check(op, n, in, out);
    backend::onednn::require(op, {{x, "x"}, {w, "w"}, {y, "y"}});
    if (b)
      for (std::size_t i = 0; i < n; ++i) std::copy(b, b + out, y + i * out);
    gemm_.run(dev, false, false, n, out, in, 1.f, x, w, b ? 1.f : 0.f, y, op);
  }

  /// dx = dy·Wᵀ.
  CIFARNET_OUTLINE void backward_data(Dev& dev, std::size_t n, std::size_t in, std::size_t out,
                                      const float* dy, const float* w, float* dx) {
    static constexpr const char* op = "Dense backward_data";
    check(op, n, in, out);
    backend::onednn::require(op, {{dy, "dy"}, {w, "w"}, {dx, "dx"}});
    gemm_.run(dev, false, true, n, in, out, 1.f, dy, w, 0.f, dx, op);
  }

  /// dW = xᵀ·dy, db = sum over the batch of dy (db may be nullptr).
  CIFARNET_OUTLINE void backward_weights(Dev& dev, std::size_t n, std::size_t in, std::size_t out,
                                         const float* x, const float* dy, float* dw, float* db) {
    static constexpr const char* op = "Dense backward_weights";
    check(op, n, in, out);
    backend::onednn::require(op, {{x, "x"}, {dy, "dy"}, {dw, "dw"}});
    gemm_.run(dev, true, false, in, out, n, 1.f, x, dy, 0.f, dw, op);
    if (db) {
      std::vector<double> acc(out, 0.0);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < out; ++j) acc[j] += double(dy[i * out + j]);
      for (std::size_t j = 0; j < out; ++j) db[j] = float(acc[j]);
    }
  }

 private:
  CIFARNET_OUTLINE static void check(const char* op, std::size_t n, std::size_t in, std::size_t out) {
    if (n == 0 || in == 0 || out == 0)
      throw ShapeError(detail::concat(op, ": empty matrix (n=", n, ", in=", in, ", out=", out, ")"));
  }

  Gemm<backend::OneDnn, float> gemm_;
};

}  // namespace ops
}  // namespace cifarnet
