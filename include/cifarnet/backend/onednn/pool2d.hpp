// cifarnet/backend/onednn/pool2d.hpp — max and average pooling on oneDNN
// (float) with TF SAME semantics: padded positions never win a max
// (pooling_max) and are excluded from the average's divisor
// (pooling_avg_exclude_padding); padding_l = {pt, pl}, padding_r = {pb, pr}.
// The output has the input's channels (g.ic; g.oc is not used).
//
// Max pooling backward needs the workspace (the argmax positions) of a
// training-mode forward. The op keeps the workspace of the last
// forward(training = true) per geometry together with the input pointer it
// came from; backward with the same x uses it, and otherwise (no training
// forward yet, or another x buffer) first recomputes the forward on x to
// rebuild it. So backward is correct for the x it is given as long as the
// contents of x did not change since the training forward that read the same
// buffer. dx is overwritten.
//
// Max pooling over NHWC data with windows that do not overlap and no padding
// (airbench's pools) runs in the project's own loops instead
// (onednn/max_pool_kernels.hpp: one byte of argmax per output, a backward
// that writes dx once), with the same rule for its argmax; so does average
// pooling over those geometries (onednn/avg_pool_kernels.hpp: ResNet's
// shortcut pools).
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "cifarnet/backend/onednn/avg_pool_kernels.hpp"
#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/backend/onednn/max_pool_kernels.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

/// Pooling with oneDNN primitives cached per (ConvGeom, PoolKind) (float).
template <class T>
struct Pool2d<backend::OneDnn, T> {
  CIFARNET_ONEDNN_FLOAT_ONLY(Pool2d, T);
  using Dev = Device<backend::OneDnn>;

  /// y = pool(x). In training, max pooling also records its workspace.
  CIFARNET_OUTLINE void forward(Dev& dev, const ConvGeom& g, PoolKind kind, bool training, const float* x,
                                float* y) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Pool2d forward";
    on::check_geometry(g, op, true);
    on::require(op, {{x, "x"}, {y, "y"}});
    if (kind == PoolKind::Max && on::max_pool::handles(g)) {
      max_forward(g, training, x, y, x);
      return;
    }
    if (kind == PoolKind::Avg && on::avg_pool::handles(g)) {
      on::avg_pool::forward(g, x, y);
      return;
    }
    on::guarded(op, [&] {
      state(dev, g, kind).forward(cache_, dev, training, x, y);
      dev.stream.wait();
    });
  }

  /// Whether forward_bf16_input takes g and kind: average or max pooling on
  /// the own kernels' geometries (windows without overlap or padding).
  CIFARNET_OUTLINE static bool reads_bf16_input(const ConvGeom& g, PoolKind kind) {
    return kind == PoolKind::Avg ? backend::onednn::avg_pool::handles(g)
                                 : backend::onednn::max_pool::handles(g);
  }
  /// The training or inference forward of average pooling with x given as
  /// bfloat16 bits (a residual stream kept in bf16: ResNet's shortcut pool
  /// reads the previous block's bf16 output), widened exactly; y float, the
  /// values of forward() on float x holding the same values. Needs
  /// reads_bf16_input(g, Avg); the backward is backward()'s.
  CIFARNET_OUTLINE void forward_bf16_input(Dev&, const ConvGeom& g, const std::uint16_t* x, float* y) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Pool2d forward (bf16 x)";
    on::check_geometry(g, op, true);
    on::require(op, {{x, "x"}, {y, "y"}});
    if (!reads_bf16_input(g, PoolKind::Avg))
      throw ConfigError(
          detail::concat(op, ": only average pooling without overlap or padding (", on::describe(g), ")"));
    on::avg_pool::forward(g, x, y);
  }
  /// The forward of max pooling with x given as bfloat16 bits (the output
  /// of a bf16 convolution written as bf16 alone: conv_bf16_output_to_pool),
  /// widened exactly; in training it records the argmax for backward() and
  /// backward_bf16(), which are then called with `src`, the float tensor x
  /// stands for (its values unwritten: the backward reads only the argmax).
  /// Needs reads_bf16_input(g, Max).
  CIFARNET_OUTLINE void forward_bf16_input(Dev&, const ConvGeom& g, bool training, const std::uint16_t* x,
                                           float* y, const float* src) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Pool2d forward (max, bf16 x)";
    on::check_geometry(g, op, true);
    on::require(op, {{x, "x"}, {y, "y"}, {src, "src"}});
    if (!reads_bf16_input(g, PoolKind::Max))
      throw ConfigError(
          detail::concat(op, ": only max pooling without overlap or padding (", on::describe(g), ")"));
    max_forward(g, training, x, y, src);
  }
  /// forward_bf16_input (max pooling) with y written only as bfloat16 bits
  /// into y_bits: the maxima are values of x, so the bits are exact (the
  /// input of a batch norm that reads bf16: pool_bf16_output_to_bn). The
  /// backward is backward()'s and backward_bf16()'s, with `src` as above.
  CIFARNET_OUTLINE void forward_bf16_io(Dev&, const ConvGeom& g, bool training, const std::uint16_t* x,
                                        std::uint16_t* y_bits, const float* src) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Pool2d forward (max, bf16 x and y)";
    on::check_geometry(g, op, true);
    on::require(op, {{x, "x"}, {y_bits, "y_bits"}, {src, "src"}});
    if (!reads_bf16_input(g, PoolKind::Max))
      throw ConfigError(
          detail::concat(op, ": only max pooling without overlap or padding (", on::describe(g), ")"));
    max_forward(g, training, x, static_cast<float*>(nullptr), src, y_bits);
  }

  /// Whether forward_padded / backward_padded take g and kind: average
  /// pooling on the own kernel's geometries (backend_traits'
  /// pool_pad_in_place).
  CIFARNET_OUTLINE static bool pads_in_place(const ConvGeom& g, PoolKind kind) {
    return kind == PoolKind::Avg && backend::onednn::avg_pool::handles(g);
  }
  /// forward() (average pooling; x float or bfloat16 bits as
  /// forward_bf16_input) with y written in place into the channel-padded
  /// output of a ChannelPad after it: `y` points at its first pixel's
  /// channel `before`, pixels `channels` floats apart; the padding channels
  /// are not touched. Needs pads_in_place(g, Avg).
  template <class X>
  CIFARNET_OUTLINE void forward_padded(Dev&, const ConvGeom& g, const X* x, float* y, std::size_t channels) {
    check_padded("Pool2d forward_padded", g, x, y, channels);
    backend::onednn::avg_pool::forward(g, x, y, channels);
  }
  /// backward() of forward_padded: dy the padded output's gradient, read at
  /// channel `before` of each pixel (`dy` points there), pixels `channels`
  /// floats apart.
  CIFARNET_OUTLINE void backward_padded(Dev&, const ConvGeom& g, const float* dy, std::size_t channels,
                                        float* dx) {
    check_padded("Pool2d backward_padded", g, dy, dx, channels);
    backend::onednn::avg_pool::backward(g, dy, dx, channels);
  }
  // forward_padded's and backward_padded's checks: the operands, and a
  // geometry they take with `channels` at least the pool's.
  template <class A>
  static void check_padded(const char* op, const ConvGeom& g, const A* a, const float* b,
                           std::size_t channels) {
    namespace on = backend::onednn;
    on::check_geometry(g, op, true);
    on::require(op, {{a, "input"}, {b, "output"}});
    if (!pads_in_place(g, PoolKind::Avg) || channels < g.ic)
      throw ConfigError(detail::concat(op, ": only average pooling without overlap or padding, with ",
                                       channels, " padded channels (", on::describe(g), ")"));
  }

  /// dx from dy (max: routed to the argmax of each window; avg: spread over
  /// the window's non-padded positions). y is not needed by oneDNN.
  CIFARNET_OUTLINE void backward(Dev& dev, const ConvGeom& g, PoolKind kind, const float* x,
                                 const float* /*y*/, const float* dy, float* dx) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Pool2d backward";
    on::check_geometry(g, op, true);
    on::require(op, {{x, "x"}, {dy, "dy"}, {dx, "dx"}});
    if (kind == PoolKind::Max && on::max_pool::handles(g)) {
      on::max_pool::backward(g, argmax_for(g, x), dy, dx);
      return;
    }
    if (kind == PoolKind::Avg && on::avg_pool::handles(g)) {
      on::avg_pool::backward(g, dy, dx);
      return;
    }
    on::guarded(op, [&] {
      state(dev, g, kind).backward(cache_, dev, x, dy, dx);
      dev.stream.wait();
    });
  }

  /// Whether backward_bf16 takes g and kind: max pooling on the own
  /// kernels' geometries (windows without overlap or padding).
  CIFARNET_OUTLINE static bool writes_bf16_dx(const ConvGeom& g, PoolKind kind) {
    return kind == PoolKind::Max && backend::onednn::max_pool::handles(g);
  }
  /// backward() with dx written as bfloat16 bits (the float dx rounded:
  /// the dy of a bf16 convolution before the pool). Needs writes_bf16_dx.
  CIFARNET_OUTLINE void backward_bf16(Dev&, const ConvGeom& g, PoolKind kind, const float* x, const float* dy,
                                      std::uint16_t* dx) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Pool2d backward (bf16 dx)";
    on::check_geometry(g, op, true);
    on::require(op, {{x, "x"}, {dy, "dy"}, {dx, "dx"}});
    if (!writes_bf16_dx(g, kind))
      throw ConfigError(
          detail::concat(op, ": only max pooling without overlap or padding (", on::describe(g), ")"));
    on::max_pool::backward_bf16(g, argmax_for(g, x), dy, dx);
  }

  /// Geometries whose primitives are cached now.
  CIFARNET_OUTLINE std::size_t cached_geometries() const { return cache_.size(); }
  /// Primitives built so far.
  CIFARNET_OUTLINE std::size_t primitive_builds() const { return cache_.builds(); }

 private:
  // The own kernels' max pooling of x (float or bf16 bits); in training its
  // argmax recorded for the float tensor `src` (x itself, or what x's bits
  // stand for).
  template <class X>
  void max_forward(const ConvGeom& g, bool training, const X* x, float* y, const float* src,
                   std::uint16_t* y_bits = nullptr) {
    std::uint8_t* a = nullptr;
    if (training) {
      argmax_.resize(g.n * g.oh * g.ow * g.ic);
      argmax_geom_ = g;
      argmax_src_ = src;
      a = argmax_.data();
    }
    backend::onednn::max_pool::forward(g, x, y, a, y_bits);
  }
  // The argmax of the last training forward of x at g, or rebuilt from x.
  const std::uint8_t* argmax_for(const ConvGeom& g, const float* x) {
    if (!argmax_geom_ || *argmax_geom_ != g || argmax_src_ != x) {
      argmax_.resize(g.n * g.oh * g.ow * g.ic);
      y_scratch_.resize(argmax_.size());
      backend::onednn::max_pool::forward(g, x, y_scratch_.data(), argmax_.data());
      argmax_geom_ = g;
      argmax_src_ = x;
    }
    return argmax_.data();
  }

  using State = backend::onednn::WorkspaceOp<dnnl::pooling_forward, dnnl::pooling_backward>;
  using Key = std::tuple<decltype(ConvGeom{}.key()), int>;

  CIFARNET_OUTLINE static State make_state(const ConvGeom& g, PoolKind kind, const dnnl::engine& eng) {
    namespace on = backend::onednn;
    const auto alg =
        kind == PoolKind::Max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
    const auto src = on::act_desc(g.fmt, g.n, g.ic, g.ih, g.iw),
               dst = on::act_desc(g.fmt, g.n, g.ic, g.oh, g.ow);
    const on::dims strides{on::dim(g.sh), on::dim(g.sw)}, kernel{on::dim(g.kh), on::dim(g.kw)},
        pad_l{on::dim(g.pt), on::dim(g.pl)}, pad_r{on::dim(g.pb), on::dim(g.pr)};
    using pf = dnnl::pooling_forward;
    return State(pf::desc(dnnl::prop_kind::forward_training, alg, src, dst, strides, kernel, pad_l, pad_r),
                 pf::desc(dnnl::prop_kind::forward_inference, alg, src, dst, strides, kernel, pad_l, pad_r),
                 dnnl::pooling_backward::desc(alg, src, dst, strides, kernel, pad_l, pad_r), src, dst, eng);
  }

  CIFARNET_OUTLINE State& state(Dev& dev, const ConvGeom& g, PoolKind kind) {
    return cache_.get(dev.engine, Key{g.key(), int(kind)}, [&] { return make_state(g, kind, dev.engine); });
  }

  backend::onednn::PrimitiveCache<Key, State> cache_;
  // The own max-pool kernels' argmax of the last training forward, its
  // geometry and input buffer (as the workspace of the primitives).
  std::vector<std::uint8_t> argmax_;
  std::optional<ConvGeom> argmax_geom_;
  const float* argmax_src_ = nullptr;
  std::vector<float> y_scratch_;  // the output of a forward rerun only to rebuild the argmax
};

}  // namespace ops
}  // namespace cifarnet
