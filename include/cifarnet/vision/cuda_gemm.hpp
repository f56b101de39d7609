// cifarnet/vision/cuda_gemm.hpp — the style-transfer losses' matrix products
// (Gram matrices and their gradients) on the GPU through cuBLAS:
// Gemm<backend::Cuda, float>, so GatysLoss runs over a Model<…, backend::Cuda>.
// Include it after <cifarnet/vision/losses.hpp>; link cifarnet::cuda.
//
// Gemm::run has no device argument (the CPU paths need none): each thread
// that calls it gets its own Device<backend::Cuda> (stream, cuBLAS handle,
// buffers) on first use. Host pointers are staged like every CUDA op's.
#pragma once

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/vision/losses.hpp"

namespace cifarnet::vision {

/// Row-major C = alpha·op(A)·op(B) + beta·C as the column-major product
/// Cᵀ = op(B)ᵀ·op(A)ᵀ (no copies), full fp32 (no TF32).
template <>
struct Gemm<backend::Cuda, float> {
  static void run(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                  const float* b, float beta, float* c) {
    namespace cu = backend::cuda;
    thread_local Device<backend::Cuda> dev;
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

}  // namespace cifarnet::vision
