// cifarnet/backend/cuda/batch_norm.hpp — spatial batch normalization through
// cuDNN.
//
// forward_train returns the batch mean and the biased variance (the op
// contract): cuDNN's running averages with factor 1 are exactly the batch
// mean and the unbiased variance, which is rescaled by (m-1)/m on the device.
// backward uses the caller's mean and variance (cuDNN's saved mean and
// inverse standard deviation, computed from them), as the other backends do.
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/backend/cuda/kernels.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <>
struct BatchNorm<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;

  void forward_train(Dev& dev, const ChannelGeom& g, double eps, const float* x, const float* gamma,
                     const float* beta, float* y, float* mean, float* var) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    Plan& p = plan(g);
    const float* dx = st.in(x, g.size());
    const float* dg = st.in(gamma, g.c);
    const float* dbt = st.in(beta, g.c);
    float* dy = st.out(y, g.size());
    float* dmean = st.out(mean, g.c);
    float* dvar = st.out(var, g.c);
    // Factor 1 keeps nothing of the old contents, but 0 * NaN is NaN: start from 0.
    cu::check(cudaMemsetAsync(dmean, 0, g.c * sizeof(float), dev.stream()), "BatchNorm (zero mean)");
    cu::check(cudaMemsetAsync(dvar, 0, g.c * sizeof(float), dev.stream()), "BatchNorm (zero variance)");
    cu::check(cudnnBatchNormalizationForwardTraining(dev.cudnn(), CUDNN_BATCHNORM_SPATIAL, &cu::kOne,
                                                     &cu::kZero, p.x, dx, p.x, dy, p.stats, dg, dbt, 1.0,
                                                     dmean, dvar, eps, nullptr, nullptr),
              "BatchNorm forward_train");
    const std::size_t m = g.n * g.h * g.w;
    if (m > 1) {
      const float unbiased_to_biased = float(double(m - 1) / double(m));
      cu::check(cudnnScaleTensor(dev.cudnn(), p.stats, dvar, &unbiased_to_biased),
                "BatchNorm (biased variance)");
    } else {
      cu::check(cudaMemsetAsync(dvar, 0, g.c * sizeof(float), dev.stream()),
                "BatchNorm (variance of one value)");
    }
    st.finish();
  }

  void forward_infer(Dev& dev, const ChannelGeom& g, double eps, const float* x, const float* gamma,
                     const float* beta, const float* mean, const float* var, float* y) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    Plan& p = plan(g);
    const float* dx = st.in(x, g.size());
    const float* dg = st.in(gamma, g.c);
    const float* dbt = st.in(beta, g.c);
    const float* dmean = st.in(mean, g.c);
    const float* dvar = st.in(var, g.c);
    float* dy = st.out(y, g.size());
    cu::check(
        cudnnBatchNormalizationForwardInference(dev.cudnn(), CUDNN_BATCHNORM_SPATIAL, &cu::kOne, &cu::kZero,
                                                p.x, dx, p.x, dy, p.stats, dg, dbt, dmean, dvar, eps),
        "BatchNorm forward_infer");
    st.finish();
  }

  void backward(Dev& dev, const ChannelGeom& g, double eps, const float* x, const float* dy,
                const float* gamma, const float* mean, const float* var, float* dx, float* dgamma,
                float* dbeta) {
    namespace cu = backend::cuda;
    Plan& p = plan(g);
    cu::Staging st(dev);
    const float* ddx_in = st.in(x, g.size());
    const float* ddy = st.in(dy, g.size());
    const float* dg = st.in(gamma, g.c);
    const float* dmean = st.in(mean, g.c);
    // cuDNN takes 1/sqrt(var + eps): computed on the GPU from the caller's
    // variance, in double as the host did (no copy, no wait).
    float* dinv = dev.buffer(kInvStdSlot, g.c);
    cu::KernelLibrary::get(dev).launch(dev, cu::kernel::inv_std, g.c, cu::KernelLibrary::kMaxBlocks,
                                       st.in(var, g.c), dinv, static_cast<long long>(g.c), eps);
    float* ddx = st.out(dx, g.size());
    float* ddg = st.out(dgamma, g.c);
    float* ddb = st.out(dbeta, g.c);
    cu::check(cudnnBatchNormalizationBackward(dev.cudnn(), CUDNN_BATCHNORM_SPATIAL, &cu::kOne, &cu::kZero,
                                              &cu::kOne, &cu::kZero, p.x, ddx_in, p.x, ddy, p.x, ddx, p.stats,
                                              dg, ddg, ddb, eps, dmean, dinv),
              "BatchNorm backward");
    st.finish();
  }

 private:
  struct Plan {
    ChannelGeom g;
    backend::cuda::TensorDesc x, stats;
  };
  Plan& plan(const ChannelGeom& g) {
    namespace cu = backend::cuda;
    for (auto& p : plans_)
      if (p->g == g) return *p;
    if (plans_.size() >= 16) plans_.erase(plans_.begin());
    auto p = std::make_unique<Plan>();
    p->g = g;
    cu::set_activation(p->x, g.fmt, g.n, g.c, g.h, g.w);
    cu::check(cudnnDeriveBNTensorDescriptor(p->stats, p->x, CUDNN_BATCHNORM_SPATIAL),
              "cudnnDeriveBNTensorDescriptor");
    plans_.push_back(std::move(p));
    return *plans_.back();
  }
  static constexpr std::size_t kInvStdSlot = 7;  // a Device op temporary (below kStagingBase)
  std::vector<std::unique_ptr<Plan>> plans_;
};

}  // namespace ops
}  // namespace cifarnet
