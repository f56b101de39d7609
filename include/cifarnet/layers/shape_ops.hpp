// cifarnet/layers/shape_ops.hpp — parameter-free layers that reshape or
// rescale: ChannelPad (the ResNet shortcut's zero channels), Rescale
// (x·a + b, e.g. the ResNet model's x/128 − 1), and PoolPadShortcut (TF
// ResNet v1's shortcut when filters change: average pool then zero-pad
// channels by (Out − In)/2 on both sides; identity when In == Out, S == 1).
#pragma once

#include <ratio>
#include <type_traits>

#include "cifarnet/layers/layer.hpp"
#include "cifarnet/layers/pool.hpp"
#include "cifarnet/nn/sequential.hpp"

namespace cifarnet {

/// Zero-pads channels: Before zero channels, the input, After zero channels.
template <int Before, int After>
struct ChannelPad : LayerBase {
  static_assert(Before >= 0 && After >= 0, "cifarnet: ChannelPad<Before, After>: pads must be >= 0.");
  static constexpr const char* kind = "channel_pad";
  static constexpr int out_channels(int in) { return in < 0 ? -1 : in + Before + After; }

  template <class B, class T>
  class Node : detail::NodeBase<T> {
    using B_ = detail::NodeBase<T>;
    using B_::dx_, B_::down_, B_::fmt_, B_::in_, B_::name_, B_::y_;

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      this->bind(in, scope, ctx);
      return {in.n, in.c + Before + After, in.h, in.w};
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      const Shape s = detail::check_input(name_, in_, x, fmt_);
      geom_ = ChannelGeom::make(fmt_, s);
      ensure_shape(y_, {s.n, s.c + Before + After, s.h, s.w}, fmt_);
      op_.forward(*rc.device, geom_, Before, After, x.data(), y_.data());
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if (!this->need_dx(rc)) return dx_;
      ensure_shape(dx_, geom_.shape(), fmt_);
      op_.backward(*rc.device, geom_, Before, After, dy.data(), dx_.data());
      return dx_;
    }

   private:
    ops::ChannelPad<B, T> op_;
    ChannelGeom geom_;
  };
};

/// y = x · Mul + Add with std::ratio constants: Rescale<std::ratio<1, 128>,
/// std::ratio<-1>> is the ResNet model's x / 128 − 1.
template <class Mul, class Add = std::ratio<0>>
struct Rescale : LayerBase {
  static constexpr const char* kind = "rescale";

  template <class B, class T>
  class Node : detail::NodeBase<T> {
    using B_ = detail::NodeBase<T>;
    using B_::dx_, B_::down_, B_::fmt_, B_::in_, B_::name_, B_::y_;

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      this->bind(in, scope, ctx);
      return in;
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      detail::check_input(name_, in_, x, fmt_);
      if (y_.shape() != x.shape()) y_.resize(x.shape());
      op_.affine(*rc.device, x.size(), x.data(), kMul, kAdd, y_.data());
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if (!this->need_dx(rc)) return dx_;
      if (dx_.shape() != dy.shape()) dx_.resize(dy.shape());
      op_.affine(*rc.device, dy.size(), dy.data(), kMul, T(0), dx_.data());
      return dx_;
    }

   private:
    static constexpr T kMul = T(double(Mul::num) / double(Mul::den));
    static constexpr T kAdd = T(double(Add::num) / double(Add::den));
    ops::Eltwise<B, T> op_;
  };
};

/// TF ResNet v1 shortcut: identity when In == Out and S == 1, else average
/// pool (S×S, stride S, SAME) followed by zero-padding (Out − In)/2 channels
/// on both sides.
template <int In, int Out, int S>
using PoolPadShortcut =
    std::conditional_t<In == Out && S == 1, Identity,
                       Sequential<AvgPool2d<S, S>, ChannelPad<(Out - In) / 2, (Out - In) - (Out - In) / 2>>>;

}  // namespace cifarnet
