// cifarnet/backend/cuda/batch_norm.hpp — spatial batch normalization with the
// backend's own NVRTC kernels (backend/cuda/kernels.hpp; cuDNN 9 deprecates
// the legacy batch-norm API this used).
//
// The arithmetic is the reference backend's, in double: forward_train takes
// the batch mean (Σx / m), then the BIASED variance from a second pass
// (Σ(x - mean)² / m, m = n·h·w: the op contract), and normalizes with them;
// forward_infer and backward use the caller's mean and variance (backward:
// dbeta = Σdy, dgamma = Σdy·xhat, dx = γ·inv/m·(m·dy - Σdy - xhat·Σdy·xhat)).
// Each per-channel sum is a two-stage reduction (channel_reduce): a grid of
// (channel tiles × row chunks) blocks writes double partial sums (NHWC:
// consecutive threads read consecutive channels), and one block per channel
// adds them in a fixed tree, so results are deterministic. The per-channel
// doubles (mean, 1/sqrt(var + eps), Σdy, Σdy·xhat) and the partials live in
// device slot kStatsSlot. Nothing is copied to the host or waited for.
#pragma once

#include <cstddef>

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
    const float* dx = st.in(x, g.size());
    const float* dg = st.in(gamma, g.c);
    const float* dbt = st.in(beta, g.c);
    float* dy = st.out(y, g.size());
    float* dmean = st.out(mean, g.c);
    float* dvar = st.out(var, g.c);
    if (g.c > 0) {
      const auto cg = cu::kernel_detail::channel_grid(g.fmt, g.n, g.c, g.h * g.w);
      double* stats = cu::scratch<double>(dev, kStatsSlot, 4 * g.c + cg.partial_count());
      double* partial = stats + 4 * g.c;
      const double m = double(g.n * g.h * g.w);
      cu::channel_reduce(dev, cg, cu::shared::kSumX, cu::shared::kOutMean, dx, nullptr, stats, partial, m,
                         eps, dmean, nullptr);
      cu::channel_reduce(dev, cg, cu::shared::kSumSqDev, cu::shared::kOutVar, dx, nullptr, stats, partial, m,
                         eps, dvar, nullptr);
      apply(dev, cg, g, dx, dg, dbt, stats, dy);
    }
    st.finish();
  }

  void forward_infer(Dev& dev, const ChannelGeom& g, double eps, const float* x, const float* gamma,
                     const float* beta, const float* mean, const float* var, float* y) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* dx = st.in(x, g.size());
    const float* dg = st.in(gamma, g.c);
    const float* dbt = st.in(beta, g.c);
    const float* dmean = st.in(mean, g.c);
    const float* dvar = st.in(var, g.c);
    float* dy = st.out(y, g.size());
    if (g.c > 0) {
      const auto cg = cu::kernel_detail::channel_grid(g.fmt, g.n, g.c, g.h * g.w);
      double* stats = cu::scratch<double>(dev, kStatsSlot, 2 * g.c);
      prepare(dev, g, eps, dmean, dvar, stats);
      apply(dev, cg, g, dx, dg, dbt, stats, dy);
    }
    st.finish();
  }

  void backward(Dev& dev, const ChannelGeom& g, double eps, const float* x, const float* dy,
                const float* gamma, const float* mean, const float* var, float* dx, float* dgamma,
                float* dbeta) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    const float* ddx_in = st.in(x, g.size());
    const float* ddy = st.in(dy, g.size());
    const float* dg = st.in(gamma, g.c);
    const float* dmean = st.in(mean, g.c);
    const float* dvar = st.in(var, g.c);
    float* ddx = st.out(dx, g.size());
    float* ddg = st.out(dgamma, g.c);
    float* ddb = st.out(dbeta, g.c);
    if (g.c > 0) {
      const auto cg = cu::kernel_detail::channel_grid(g.fmt, g.n, g.c, g.h * g.w);
      double* stats = cu::scratch<double>(dev, kStatsSlot, 4 * g.c + cg.partial_count());
      double* partial = stats + 4 * g.c;
      const double m = double(g.n * g.h * g.w);
      prepare(dev, g, eps, dmean, dvar, stats);
      cu::channel_reduce(dev, cg, cu::shared::kSumDyXhat, cu::shared::kOutBnGrad, ddx_in, ddy, stats, partial,
                         m, eps, ddg, ddb);
      cu::KernelLibrary::get(dev).launch(dev, cu::kernel::bn_dx, g.size(), cu::kWalkBlocks, ddx_in, ddy, dg,
                                         stats, ddx, static_cast<long long>(g.size()), cg.c, cg.hw, cg.nchw,
                                         m);
    }
    st.finish();
  }

 private:
  // The per-channel doubles and the reductions' partial sums: a Device op
  // temporary (below kStagingBase) that no other op needs during this one.
  static constexpr std::size_t kStatsSlot = 7;

  // stats[0, c) = the caller's mean, stats[c, 2c) = 1/sqrt(var + eps).
  static void prepare(Dev& dev, const ChannelGeom& g, double eps, const float* mean, const float* var,
                      double* stats) {
    namespace cu = backend::cuda;
    cu::KernelLibrary::get(dev).launch(dev, cu::kernel::bn_prepare, g.c, cu::KernelLibrary::kMaxBlocks, mean,
                                       var, stats, static_cast<long long>(g.c), eps);
  }
  // y = γ·(x - mean)·inv + β with the mean and inv in stats.
  static void apply(Dev& dev, const backend::cuda::kernel_detail::ChannelGrid& cg, const ChannelGeom& g,
                    const float* x, const float* gamma, const float* beta, const double* stats, float* y) {
    namespace cu = backend::cuda;
    cu::KernelLibrary::get(dev).launch(dev, cu::kernel::bn_apply, g.size(), cu::kWalkBlocks, x, gamma, beta,
                                       stats, y, static_cast<long long>(g.size()), cg.c, cg.hw, cg.nchw);
  }
};

}  // namespace ops
}  // namespace cifarnet
