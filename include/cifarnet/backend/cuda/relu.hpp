// cifarnet/backend/cuda/relu.hpp — ReLU through cuDNN's activation functions
// (NaN propagates, as in the reference). In place (x == y, dy == dx) is
// allowed: cuDNN's activations accept identical input and output buffers.
#pragma once

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <>
struct Relu<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;

  void forward(Dev& dev, std::size_t n, const float* x, float* y) {
    namespace cu = backend::cuda;
    prepare(n);
    cu::Staging st(dev);
    const float* dx = st.in(x, n);
    float* dy = st.out(y, n);
    cu::check(cudnnActivationForward(dev.cudnn(), act_, &cu::kOne, desc_, dx, &cu::kZero, desc_, dy),
              "Relu forward");
    st.finish();
  }

  /// Uses the output y (y > 0 exactly where x > 0).
  void backward(Dev& dev, std::size_t n, const float* y, const float* dy, float* dx) {
    namespace cu = backend::cuda;
    prepare(n);
    cu::Staging st(dev);
    const float* dyv = st.in(y, n);
    const float* ddy = st.in(dy, n);
    float* ddx = st.out(dx, n);
    cu::check(cudnnActivationBackward(dev.cudnn(), act_, &cu::kOne, desc_, dyv, desc_, ddy, desc_, dyv,
                                      &cu::kZero, desc_, ddx),
              "Relu backward");
    st.finish();
  }

 private:
  void prepare(std::size_t n) {
    namespace cu = backend::cuda;
    if (!ready_) {
      cu::check(cudnnSetActivationDescriptor(act_, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
                "cudnnSetActivationDescriptor");
      ready_ = true;
    }
    if (n != n_) {
      cu::set_strided(desc_, 1, 1, 1, n, n, n, n, 1);
      n_ = n;
    }
  }
  backend::cuda::ActDesc act_;
  backend::cuda::TensorDesc desc_;
  std::size_t n_ = 0;
  bool ready_ = false;
};

}  // namespace ops
}  // namespace cifarnet
