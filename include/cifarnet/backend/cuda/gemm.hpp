// cifarnet/backend/cuda/gemm.hpp — row-major matrix products through cuBLAS
// (the style-transfer Gram matrices and their gradients): C = alpha·op(A)·
// op(B) + beta·C as the column-major product Cᵀ = op(B)ᵀ·op(A)ᵀ (no copies),
// full fp32 (no TF32). Host pointers are staged like every CUDA op's.
#pragma once

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <>
struct Gemm<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;
  void run(Dev& dev, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
           const float* a, const float* b, float beta, float* c) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* da = st.in(a, m * k);
    const float* db = st.in(b, k * n);
    float* dc = beta == 0.0f ? st.out(c, m * n) : st.inout(c, m * n);
    const int M = cu::to_int(m, "rows"), N = cu::to_int(n, "columns"), K = cu::to_int(k, "inner size");
    cu::check(cublasSgemm(dev.cublas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M,
                          K, &alpha, db, tb ? K : N, da, ta ? M : K, &beta, dc, N),
              "Gemm (sgemm)");
    st.finish();
  }
};

}  // namespace ops
}  // namespace cifarnet
