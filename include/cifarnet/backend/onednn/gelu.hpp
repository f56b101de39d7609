// cifarnet/backend/onednn/gelu.hpp — the exact (erf) GELU on oneDNN (float):
// eltwise_forward / eltwise_backward with eltwise_gelu_erf. The backward
// primitive reads the input x (GELU's derivative is not a function of its
// output), so the forward must not overwrite x when a backward follows.
// Tensors are flat vectors of n elements (tag a); primitives are cached per
// n (eltwise_unary.hpp).
#pragma once

#include "cifarnet/backend/onednn/eltwise_unary.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

/// GELU (erf form) with oneDNN primitives cached per element count (float).
template <class T>
struct Gelu<backend::OneDnn, T>
    : backend::onednn::EltwiseUnary<dnnl::algorithm::eltwise_gelu_erf, DNNL_ARG_SRC> {
  CIFARNET_ONEDNN_FLOAT_ONLY(Gelu, T);
  /// y = x·Φ(x); x == y allowed (inference only: backward needs x).
  CIFARNET_OUTLINE void forward(Dev& dev, std::size_t n, const float* x, float* y) {
    run_forward(dev, n, x, y, "Gelu forward");
  }
  /// dx = dy·(Φ(x) + x·φ(x)); dy == dx allowed.
  CIFARNET_OUTLINE void backward(Dev& dev, std::size_t n, const float* x, const float* dy, float* dx) {
    run_backward(dev, n, x, dy, dx, "Gelu backward", "x");
  }
};

}  // namespace ops
}  // namespace cifarnet
