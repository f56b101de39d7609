// cifarnet/backend/onednn/lrn.hpp — local response normalization across
// channels on oneDNN (float), in TensorFlow's form
// y_c = x_c / (bias + alpha * sum_{|j-c| <= r} x_j^2)^beta.
// oneDNN divides alpha by the window size, so it gets local_size = 2r + 1 and
// alpha * (2r + 1); k = bias.
//
// oneDNN 2.6 workaround: its AVX-512 nhwc LRN backward crashes (SIGSEGV)
// for local_size 1 (depth_radius 0). With a window of one channel LRN is
// elementwise, so the op then describes the buffer as nchw whatever its
// format; the result is the same element for element.
//
// Backward reads x (y is not needed). Where the chosen implementation keeps a
// workspace, the op holds the one of the last forward(training = true) per
// geometry with the x it came from, exactly like max pooling (pool2d.hpp):
// backward with another x first recomputes the forward. dx is overwritten.
#pragma once

#include <tuple>

#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

/// LRN with oneDNN primitives cached per (ChannelGeom, LrnParams) (float).
template <class T>
struct Lrn<backend::OneDnn, T> {
  CIFARNET_ONEDNN_FLOAT_ONLY(Lrn, T);
  using Dev = Device<backend::OneDnn>;

  /// y = lrn(x).
  CIFARNET_OUTLINE void forward(Dev& dev, const ChannelGeom& g, const LrnParams& p, bool training,
                                const float* x, float* y) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Lrn forward";
    check(g, p, op);
    on::require(op, {{x, "x"}, {y, "y"}});
    on::guarded(op, [&] {
      state(dev, g, p).forward(cache_, dev, training, x, y);
      dev.stream.wait();
    });
  }

  /// dx from x and dy.
  CIFARNET_OUTLINE void backward(Dev& dev, const ChannelGeom& g, const LrnParams& p, const float* x,
                                 const float* /*y*/, const float* dy, float* dx) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Lrn backward";
    check(g, p, op);
    on::require(op, {{x, "x"}, {dy, "dy"}, {dx, "dx"}});
    on::guarded(op, [&] {
      state(dev, g, p).backward(cache_, dev, x, dy, dx);
      dev.stream.wait();
    });
  }

  /// Geometries (with their LRN parameters) whose primitives are cached now.
  CIFARNET_OUTLINE std::size_t cached_geometries() const { return cache_.size(); }
  /// Primitives built so far.
  CIFARNET_OUTLINE std::size_t primitive_builds() const { return cache_.builds(); }

 private:
  using State = backend::onednn::WorkspaceOp<dnnl::lrn_forward, dnnl::lrn_backward>;
  using Key = std::tuple<decltype(ChannelGeom{}.key()), std::size_t, double, double, double>;

  CIFARNET_OUTLINE static State make_state(const ChannelGeom& g, const LrnParams& p,
                                           const dnnl::engine& eng) {
    namespace on = backend::onednn;
    const auto data = on::act_desc(p.depth_radius == 0 ? DataFormat::NCHW : g.fmt, g.n, g.c, g.h, g.w);
    const on::dim size = on::dim(2 * p.depth_radius + 1);
    const float alpha = float(p.alpha * double(size)), beta = float(p.beta), k = float(p.bias);
    const auto alg = dnnl::algorithm::lrn_across_channels;
    using lf = dnnl::lrn_forward;
    return State(lf::desc(dnnl::prop_kind::forward_training, alg, data, size, alpha, beta, k),
                 lf::desc(dnnl::prop_kind::forward_inference, alg, data, size, alpha, beta, k),
                 dnnl::lrn_backward::desc(alg, data, data, size, alpha, beta, k), data, data, eng);
  }

  CIFARNET_OUTLINE static void check(const ChannelGeom& g, const LrnParams& p, const char* op) {
    backend::onednn::check_geometry(g, op);
    if (!(p.bias > 0.0) || !(p.alpha >= 0.0) || !(p.beta >= 0.0))
      throw ConfigError(detail::concat(op, ": LRN needs bias > 0, alpha >= 0 and beta >= 0 (got bias=",
                                       p.bias, ", alpha=", p.alpha, ", beta=", p.beta, ")"));
  }

  CIFARNET_OUTLINE State& state(Dev& dev, const ChannelGeom& g, const LrnParams& p) {
    return cache_.get(dev.engine, Key{g.key(), p.depth_radius, p.bias, p.alpha, p.beta},
                      [&] { return make_state(g, p, dev.engine); });
  }

  backend::onednn::PrimitiveCache<Key, State> cache_;
};

}  // namespace ops
}  // namespace cifarnet
