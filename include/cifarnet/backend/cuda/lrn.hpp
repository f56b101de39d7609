// cifarnet/backend/cuda/lrn.hpp — cross-channel local response normalization
// through cuDNN.
//
// cuDNN computes y = x / (k + (α/n) Σ x²)^β over a window of n = 2r + 1
// channels; TensorFlow's alpha multiplies the sum directly, so cuDNN gets
// α·n. cuDNN's limits (1 ≤ n ≤ 16, k ≥ 1e-5, β ≥ 0.01) are checked with an
// error naming the parameter. NHWC tensors are transposed to NCHW around the
// cuDNN call, which handles the channel window on packed NCHW data; the
// transposes are the backend's own kernel (transform, backend/cuda/
// kernels.hpp: cuDNN 9 deprecates the cudnnTransformTensor this used).
#pragma once

#include <memory>
#include <vector>

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/backend/cuda/kernels.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <>
struct Lrn<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;

  void forward(Dev& dev, const ChannelGeom& g, const LrnParams& lp, bool /*training*/, const float* x,
               float* y) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    Plan& p = plan(g, lp);
    const float* dx = st.in(x, g.size());
    float* dy = st.out(y, g.size());
    const float* xs = to_nchw(dev, p, dx, kX);
    float* ys = p.nhwc ? dev.buffer(kY, g.size()) : dy;
    cu::check(cudnnLRNCrossChannelForward(dev.cudnn(), p.lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &cu::kOne, p.nchw,
                                          xs, &cu::kZero, p.nchw, ys),
              "Lrn forward");
    from_nchw(dev, p, ys, dy);
    st.finish();
  }

  void backward(Dev& dev, const ChannelGeom& g, const LrnParams& lp, const float* x, const float* y,
                const float* dy, float* dx) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    Plan& p = plan(g, lp);
    const float* dxin = st.in(x, g.size());
    const float* dyout = st.in(y, g.size());
    const float* ddy = st.in(dy, g.size());
    float* ddx = st.out(dx, g.size());
    const float* xs = to_nchw(dev, p, dxin, kX);
    const float* ys = to_nchw(dev, p, dyout, kY);
    const float* dys = to_nchw(dev, p, ddy, kDy);
    float* dxs = p.nhwc ? dev.buffer(kDx, g.size()) : ddx;
    cu::check(cudnnLRNCrossChannelBackward(dev.cudnn(), p.lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &cu::kOne,
                                           p.nchw, ys, p.nchw, dys, p.nchw, xs, &cu::kZero, p.nchw, dxs),
              "Lrn backward");
    from_nchw(dev, p, dxs, ddx);
    st.finish();
  }

 private:
  static constexpr std::size_t kX = 2, kY = 3, kDy = 4, kDx = 5;

  struct Plan {
    ChannelGeom g;
    LrnParams lp;
    bool nhwc = false;
    backend::cuda::TensorDesc nchw, user;  ///< packed NCHW, and the caller's layout
    backend::cuda::LrnDesc lrn;
  };

  static bool same(const LrnParams& a, const LrnParams& b) {
    return a.depth_radius == b.depth_radius && a.bias == b.bias && a.alpha == b.alpha && a.beta == b.beta;
  }

  Plan& plan(const ChannelGeom& g, const LrnParams& lp) {
    namespace cu = backend::cuda;
    for (auto& p : plans_)
      if (p->g == g && same(p->lp, lp)) return *p;
    const std::size_t n = 2 * lp.depth_radius + 1;
    if (n < CUDNN_LRN_MIN_N || n > CUDNN_LRN_MAX_N)
      throw ConfigError(detail::concat("CUDA Lrn: depth_radius ", lp.depth_radius, " gives a window of ", n,
                                       " channels; cuDNN supports ", CUDNN_LRN_MIN_N, " to ",
                                       CUDNN_LRN_MAX_N));
    if (lp.bias < CUDNN_LRN_MIN_K)
      throw ConfigError(
          detail::concat("CUDA Lrn: bias ", lp.bias, " is below cuDNN's minimum ", CUDNN_LRN_MIN_K));
    if (lp.beta < CUDNN_LRN_MIN_BETA)
      throw ConfigError(
          detail::concat("CUDA Lrn: beta ", lp.beta, " is below cuDNN's minimum ", CUDNN_LRN_MIN_BETA));
    if (plans_.size() >= 16) plans_.erase(plans_.begin());
    auto p = std::make_unique<Plan>();
    p->g = g;
    p->lp = lp;
    p->nhwc = g.fmt == DataFormat::NHWC;
    cu::set_activation(p->nchw, DataFormat::NCHW, g.n, g.c, g.h, g.w);
    cu::set_activation(p->user, g.fmt, g.n, g.c, g.h, g.w);
    cu::check(cudnnSetLRNDescriptor(p->lrn, unsigned(n), lp.alpha * double(n), lp.beta, lp.bias),
              "cudnnSetLRNDescriptor");
    plans_.push_back(std::move(p));
    return *plans_.back();
  }

  // The caller's tensor as packed NCHW (itself when it already is).
  static const float* to_nchw(Dev& dev, Plan& p, const float* t, std::size_t slot) {
    namespace cu = backend::cuda;
    if (!p.nhwc) return t;
    float* out = dev.buffer(slot, p.g.size());
    cu::transform(dev, p.user, t, p.nchw, out);
    return out;
  }
  static void from_nchw(Dev& dev, Plan& p, const float* t, float* out) {
    namespace cu = backend::cuda;
    if (!p.nhwc) return;
    cu::transform(dev, p.nchw, t, p.user, out);
  }

  std::vector<std::unique_ptr<Plan>> plans_;
};

}  // namespace ops
}  // namespace cifarnet
