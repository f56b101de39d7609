// cifarnet/backend/cuda/relu.hpp — ReLU with the backend's own NVRTC kernels
// (cn_relu, cn_relu_bwd in backend/cuda/kernels.hpp; cuDNN 9 deprecates the
// legacy activation API this used). The element math is the reference
// backend's (shared::relu, shared::relu_grad): NaN propagates, backward uses
// the output. In place (x == y, dy == dx) is allowed: each thread reads and
// writes one element.
#pragma once

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/backend/cuda/kernels.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <>
struct Relu<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;

  void forward(Dev& dev, std::size_t n, const float* x, float* y) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* dx = st.in(x, n);
    float* dy = st.out(y, n);
    cu::KernelLibrary::get(dev).launch(dev, cu::kernel::relu, n, cu::KernelLibrary::kMaxBlocks, dx, dy,
                                       static_cast<long long>(n));
    st.finish();
  }

  /// Uses the output y (y > 0 exactly where x > 0).
  void backward(Dev& dev, std::size_t n, const float* y, const float* dy, float* dx) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* dyv = st.in(y, n);
    const float* ddy = st.in(dy, n);
    float* ddx = st.out(dx, n);
    cu::KernelLibrary::get(dev).launch(dev, cu::kernel::relu_bwd, n, cu::KernelLibrary::kMaxBlocks, dyv, ddy,
                                       ddx, static_cast<long long>(n));
    st.finish();
  }
};

}  // namespace ops
}  // namespace cifarnet
