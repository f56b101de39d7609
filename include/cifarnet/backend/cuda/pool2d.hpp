// cifarnet/backend/cuda/pool2d.hpp — max and average pooling through cuDNN.
//
// Average pooling excludes padding (TF SAME). Symmetric padding uses cuDNN's
// own (CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, max pooling ignores pads).
// Asymmetric padding pools an explicitly padded copy without padding: filled
// with -inf for max, with 0 for average, whose result (and, in backward, the
// incoming gradient) is then rescaled per output position by
// (window size / window elements inside the input), a small map built once
// per geometry and applied with cudnnOpTensor (broadcast over n and c).
#pragma once

#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <>
struct Pool2d<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;

  void forward(Dev& dev, const ConvGeom& g, PoolKind kind, bool /*training*/, const float* x, float* y) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    Plan& p = plan(dev, g, kind);
    const float* dx = st.in(x, in_size(g));
    float* dy = st.out(y, out_size(g));
    if (!p.pad.on) {
      cu::check(cudnnPoolingForward(dev.cudnn(), p.pool, &cu::kOne, p.x, dx, &cu::kZero, p.y, dy),
                "Pool2d forward");
    } else {
      const float* xp = cu::pad_copy(dev, kPaddedSlot, p.pad, p.x, dx, border(kind));
      if (kind == PoolKind::Max) {
        cu::check(cudnnPoolingForward(dev.cudnn(), p.pool, &cu::kOne, p.xpool, xp, &cu::kZero, p.y, dy),
                  "Pool2d forward (padded)");
      } else {
        float* t = dev.buffer(kTempSlot, out_size(g));
        cu::check(cudnnPoolingForward(dev.cudnn(), p.pool, &cu::kOne, p.xpool, xp, &cu::kZero, p.y, t),
                  "Pool2d forward (padded)");
        rescale(dev, p, t, dy);
      }
    }
    st.finish();
  }

  void backward(Dev& dev, const ConvGeom& g, PoolKind kind, const float* x, const float* y, const float* dy,
                float* dx) {
    namespace cu = backend::cuda;
    cu::Staging st(dev);
    Plan& p = plan(dev, g, kind);
    const float* dxin = st.in(x, in_size(g));
    const float* dyout = st.in(y, out_size(g));
    const float* ddy = st.in(dy, out_size(g));
    float* ddx = st.out(dx, in_size(g));
    if (!p.pad.on) {
      cu::check(cudnnPoolingBackward(dev.cudnn(), p.pool, &cu::kOne, p.y, dyout, p.y, ddy, p.x, dxin,
                                     &cu::kZero, p.x, ddx),
                "Pool2d backward");
    } else {
      const float* xp = cu::pad_copy(dev, kPaddedSlot, p.pad, p.x, dxin, border(kind));
      float* dxp = dev.buffer(kGradSlot, p.pad.size);
      if (kind == PoolKind::Max) {
        cu::check(cudnnPoolingBackward(dev.cudnn(), p.pool, &cu::kOne, p.y, dyout, p.y, ddy, p.xpool, xp,
                                       &cu::kZero, p.xpool, dxp),
                  "Pool2d backward (padded)");
      } else {
        float* t = dev.buffer(kTempSlot, out_size(g));
        rescale(dev, p, ddy, t);
        cu::check(cudnnPoolingBackward(dev.cudnn(), p.pool, &cu::kOne, p.y, t, p.y, t, p.xpool, xp,
                                       &cu::kZero, p.xpool, dxp),
                  "Pool2d backward (padded)");
      }
      cu::unpad(dev, p.pad, dxp, p.x, ddx);
    }
    st.finish();
  }

 private:
  static constexpr std::size_t kPaddedSlot = 2, kGradSlot = 3, kTempSlot = 4;

  struct Plan {
    ConvGeom g;
    PoolKind kind = PoolKind::Max;
    backend::cuda::PaddedInput pad;  ///< asymmetric padding: pool an explicitly padded copy
    backend::cuda::TensorDesc x, y, xpool, scale_desc;
    backend::cuda::PoolDesc pool;
    backend::cuda::DeviceBuffer<float> scale;  ///< (1, 1, oh, ow): window size / elements inside
    cudnnOpTensorDescriptor_t mul = nullptr;
    ~Plan() {
      if (mul) (void)cudnnDestroyOpTensorDescriptor(mul);
    }
  };

  static std::size_t in_size(const ConvGeom& g) { return g.n * g.ic * g.ih * g.iw; }
  static std::size_t out_size(const ConvGeom& g) { return g.n * g.ic * g.oh * g.ow; }

  Plan& plan(Dev& dev, const ConvGeom& g, PoolKind kind) {
    for (auto& p : plans_)
      if (p->g == g && p->kind == kind) return *p;
    if (plans_.size() >= 16) plans_.erase(plans_.begin());
    plans_.push_back(build(dev, g, kind));
    return *plans_.back();
  }

  static std::unique_ptr<Plan> build(Dev& dev, const ConvGeom& g, PoolKind kind) {
    namespace cu = backend::cuda;
    auto p = std::make_unique<Plan>();
    p->g = g;
    p->kind = kind;
    cu::set_activation(p->x, g.fmt, g.n, g.ic, g.ih, g.iw);
    cu::set_activation(p->y, g.fmt, g.n, g.ic, g.oh, g.ow);
    const auto [pad_h, pad_w] = p->pad.setup(g, g.ic, p->xpool);
    const cudnnPoolingMode_t mode = kind == PoolKind::Max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                    : p->pad.on           ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                          : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    cu::check(cudnnSetPooling2dDescriptor(p->pool, mode, CUDNN_PROPAGATE_NAN, cu::to_int(g.kh, "window"),
                                          cu::to_int(g.kw, "window"), pad_h, pad_w,
                                          cu::to_int(g.sh, "stride"), cu::to_int(g.sw, "stride")),
              "cudnnSetPooling2dDescriptor");
    int on = 0, oc = 0, oh = 0, ow = 0;
    cu::check(cudnnGetPooling2dForwardOutputDim(p->pool, p->xpool, &on, &oc, &oh, &ow),
              "cudnnGetPooling2dForwardOutputDim");
    if (std::size_t(oh) != g.oh || std::size_t(ow) != g.ow)
      throw BackendError(detail::concat("CUDA Pool2d: cuDNN's output ", oh, "x", ow,
                                        " differs from the geometry's ", g.oh, "x", g.ow));
    if (p->pad.on && kind == PoolKind::Avg) {
      std::vector<float> s(g.oh * g.ow);
      for (std::size_t oy = 0; oy < g.oh; ++oy)
        for (std::size_t ox = 0; ox < g.ow; ++ox) {
          const long y0 = long(oy * g.sh) - long(g.pt), x0 = long(ox * g.sw) - long(g.pl);
          const long ny = std::min(y0 + long(g.kh), long(g.ih)) - std::max(y0, 0L);
          const long nx = std::min(x0 + long(g.kw), long(g.iw)) - std::max(x0, 0L);
          s[oy * g.ow + ox] = float(double(g.kh * g.kw) / double(ny * nx));
        }
      p->scale = cu::DeviceBuffer<float>(s.size());
      cu::copy_to_device(dev, p->scale.data(), s.data(), s.size() * sizeof(float),
                         "Pool2d (upload the average's rescaling map)");
      dev.sync();  // s goes when this returns
      cu::set_strided(p->scale_desc, 1, 1, g.oh, g.ow, g.oh * g.ow, g.oh * g.ow, g.ow, 1);
      cu::check(cudnnCreateOpTensorDescriptor(&p->mul), "cudnnCreateOpTensorDescriptor");
      cu::check(
          cudnnSetOpTensorDescriptor(p->mul, CUDNN_OP_TENSOR_MUL, CUDNN_DATA_FLOAT, CUDNN_PROPAGATE_NAN),
          "cudnnSetOpTensorDescriptor");
    }
    (void)dev;
    return p;
  }

  // The padded copy's border: the pooling's neutral value.
  static float border(PoolKind kind) {
    return kind == PoolKind::Max ? -std::numeric_limits<float>::infinity() : 0.0f;
  }

  // out = in * scale (broadcast over n and c).
  static void rescale(Dev& dev, Plan& p, const float* in, float* out) {
    namespace cu = backend::cuda;
    cu::check(cudnnOpTensor(dev.cudnn(), p.mul, &cu::kOne, p.y, in, &cu::kOne, p.scale_desc, p.scale.data(),
                            &cu::kZero, p.y, out),
              "Pool2d (average over the elements inside the input)");
  }

  std::vector<std::unique_ptr<Plan>> plans_;
};

}  // namespace ops
}  // namespace cifarnet
