// cifarnet/backend/onednn/gemm.hpp — row-major matrix products through
// dnnl_sgemm (multi-threaded, float; builds no primitive, nothing to cache).
// ops::Dense<OneDnn> and the style-transfer Gram matrices use it.
#pragma once

#include <dnnl.h>

#include <cstddef>

#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct Gemm<backend::OneDnn, T> {
  CIFARNET_ONEDNN_FLOAT_ONLY(Gemm, T);
  using Dev = Device<backend::OneDnn>;
  CIFARNET_OUTLINE void run(Dev&, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                            const float* a, const float* b, float beta, float* c, const char* who = "Gemm") {
    using backend::onednn::dim;
    const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', dim(m), dim(n), dim(k), alpha, a,
                                        dim(ta ? m : k), b, dim(tb ? k : n), beta, c, dim(n));
    if (st != dnnl_success)
      throw BackendError(detail::concat("oneDNN ", who, ": dnnl_sgemm failed (status ",
                                        backend::onednn::status_name(st), " = ", int(st), ", ", m, "x", n,
                                        "x", k, ")"));
  }
};

}  // namespace ops
}  // namespace cifarnet
