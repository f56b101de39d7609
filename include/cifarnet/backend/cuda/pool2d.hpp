// cifarnet/backend/cuda/pool2d.hpp — max and average pooling with the
// backend's own NVRTC kernels (cn_pool, cn_pool_bwd in
// backend/cuda/kernels.hpp; cuDNN 9 deprecates the legacy pooling API this
// used).
//
// The kernels compute each window straight from the geometry (pads top,
// left, bottom, right, strides, window; NCHW and NHWC), clipped to the
// input, so asymmetric padding needs no padded copy and no rescaling map.
// Semantics are the reference backend's, bit for bit (shared::pool_forward,
// shared::pool_backward, checked on the host by the tests): average
// excludes padding (TF SAME: the divisor is the number of window elements
// inside the input) and sums in float in window order; max ignores padding
// and NaN (a strictly greater value wins, from -inf), and its gradient goes
// to the first element of the window, in window order, equal to the output.
// Backward runs one thread per input element, gathering from the outputs
// whose windows hold it, in output order: dx written once, deterministic,
// no atomics.
#pragma once

#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/backend/cuda/kernels.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <>
struct Pool2d<backend::Cuda, float> {
  using Dev = Device<backend::Cuda>;

  void forward(Dev& dev, const ConvGeom& g, PoolKind kind, bool /*training*/, const float* x, float* y) {
    namespace cu = backend::cuda;
    const auto shape = pool_shape(g, kind);
    cu::Staging st(dev);
    const float* dx = st.in(x, in_size(g));
    float* dy = st.out(y, out_size(g));
    cu::KernelLibrary::get(dev).launch(dev, cu::kernel::pool, out_size(g), cu::kWalkBlocks, dx, dy,
                                       static_cast<long long>(out_size(g)), shape);
    st.finish();
  }

  /// x and y are read for max pooling only.
  void backward(Dev& dev, const ConvGeom& g, PoolKind kind, const float* x, const float* y, const float* dy,
                float* dx) {
    namespace cu = backend::cuda;
    const auto shape = pool_shape(g, kind);
    cu::Staging st(dev);
    const bool max = kind == PoolKind::Max;
    const float* dxin = max ? st.in(x, in_size(g)) : nullptr;
    const float* dyout = max ? st.in(y, out_size(g)) : nullptr;
    const float* ddy = st.in(dy, out_size(g));
    float* ddx = st.out(dx, in_size(g));
    cu::KernelLibrary::get(dev).launch(dev, cu::kernel::pool_bwd, in_size(g), cu::kWalkBlocks, dxin, dyout,
                                       ddy, ddx, static_cast<long long>(in_size(g)), shape);
    st.finish();
  }

 private:
  static std::size_t in_size(const ConvGeom& g) { return g.n * g.ic * g.ih * g.iw; }
  static std::size_t out_size(const ConvGeom& g) { return g.n * g.ic * g.oh * g.ow; }

  static backend::cuda::shared::PoolShape pool_shape(const ConvGeom& g, PoolKind kind) {
    using backend::cuda::to_int;
    backend::cuda::shared::PoolShape s{};
    s.c = to_int(g.ic, "channels");
    s.ih = to_int(g.ih, "height");
    s.iw = to_int(g.iw, "width");
    s.oh = to_int(g.oh, "output height");
    s.ow = to_int(g.ow, "output width");
    s.kh = to_int(g.kh, "window");
    s.kw = to_int(g.kw, "window");
    s.sh = to_int(g.sh, "stride");
    s.sw = to_int(g.sw, "stride");
    s.pt = to_int(g.pt, "padding");
    s.pl = to_int(g.pl, "padding");
    s.nchw = g.fmt == DataFormat::NCHW ? 1 : 0;
    s.max = kind == PoolKind::Max ? 1 : 0;
    if (s.sh == 0 || s.sw == 0 || s.kh == 0 || s.kw == 0)
      throw ShapeError("CUDA Pool2d: a window or stride of 0");
    return s;
  }
};

}  // namespace ops
}  // namespace cifarnet
