// cifarnet/backend/onednn/relu.hpp — rectified linear unit on oneDNN
// (float): eltwise_forward / eltwise_backward with
// eltwise_relu_use_dst_for_bwd, so backward needs only the output y and dy
// (the input may already be overwritten: forward works in place, x == y, and
// backward in place, dy == dx). Tensors are flat vectors of n elements
// (tag a); primitives are cached per n (eltwise_unary.hpp). dx is overwritten.
#pragma once

#include "cifarnet/backend/onednn/eltwise_unary.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

/// ReLU with oneDNN primitives cached per element count (float).
template <class T>
struct Relu<backend::OneDnn, T>
    : backend::onednn::EltwiseUnary<dnnl::algorithm::eltwise_relu_use_dst_for_bwd, DNNL_ARG_DST> {
  CIFARNET_ONEDNN_FLOAT_ONLY(Relu, T);
  /// y = max(x, 0); x == y allowed.
  CIFARNET_OUTLINE void forward(Dev& dev, std::size_t n, const float* x, float* y) {
    run_forward(dev, n, x, y, "Relu forward");
  }
  /// dx = dy where y > 0, else 0; dy == dx allowed.
  CIFARNET_OUTLINE void backward(Dev& dev, std::size_t n, const float* y, const float* dy, float* dx) {
    run_backward(dev, n, y, dy, dx, "Relu backward", "y");
  }
};

}  // namespace ops
}  // namespace cifarnet
