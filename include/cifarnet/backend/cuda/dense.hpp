// cifarnet/backend/cuda/dense.hpp — fully connected layers through cuBLAS.
//
// Row-major (n, in) x (in, out) products are column-major products of the
// transposes: Yᵀ = Wᵀ Xᵀ, dXᵀ = W dYᵀ, dWᵀ = dYᵀ X, all without copies. The
// bias is added and its gradient summed (in double) by the backend's own
// NVRTC kernels over the (n, out) rows (add_channel_bias and channel_sum,
// backend/cuda/kernels.hpp; cuDNN 9 deprecates the cudnnAddTensor and
// cudnnConvolutionBackwardBias this used).
#pragma once

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/backend/cuda/kernels.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <>
struct Dense<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;

  void forward(Dev& dev, std::size_t n, std::size_t in, std::size_t out, const float* x, const float* w,
               const float* b, float* y) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* dx = st.in(x, n * in);
    const float* dw = st.in(w, in * out);
    const float* db = b ? st.in(b, out) : nullptr;
    float* dy = st.out(y, n * out);
    const int N = cu::to_int(n, "batch"), I = cu::to_int(in, "inputs"), O = cu::to_int(out, "outputs");
    cu::check(cublasSgemm(dev.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, O, N, I, &cu::kOne, dw, O, dx, I,
                          &cu::kZero, dy, O),
              "Dense forward (sgemm)");
    if (db) cu::add_channel_bias(dev, DataFormat::NCHW, n, out, 1, db, dy);
    st.finish();
  }

  void backward_data(Dev& dev, std::size_t n, std::size_t in, std::size_t out, const float* dy,
                     const float* w, float* dx) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* ddy = st.in(dy, n * out);
    const float* dw = st.in(w, in * out);
    float* ddx = st.out(dx, n * in);
    const int N = cu::to_int(n, "batch"), I = cu::to_int(in, "inputs"), O = cu::to_int(out, "outputs");
    cu::check(cublasSgemm(dev.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, I, N, O, &cu::kOne, dw, O, ddy, O,
                          &cu::kZero, ddx, I),
              "Dense backward_data (sgemm)");
    st.finish();
  }

  void backward_weights(Dev& dev, std::size_t n, std::size_t in, std::size_t out, const float* x,
                        const float* dy, float* dw, float* db) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* dx = st.in(x, n * in);
    const float* ddy = st.in(dy, n * out);
    float* ddw = st.out(dw, in * out);
    float* ddb = db ? st.out(db, out) : nullptr;
    const int N = cu::to_int(n, "batch"), I = cu::to_int(in, "inputs"), O = cu::to_int(out, "outputs");
    cu::check(cublasSgemm(dev.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, O, I, N, &cu::kOne, ddy, O, dx, I,
                          &cu::kZero, ddw, O),
              "Dense backward_weights (sgemm)");
    if (ddb) cu::channel_sum(dev, DataFormat::NCHW, n, out, 1, ddy, ddb);
    st.finish();
  }
};

}  // namespace ops
}  // namespace cifarnet
