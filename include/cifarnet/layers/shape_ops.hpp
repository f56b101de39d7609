// cifarnet/layers/shape_ops.hpp — parameter-free layers that reshape or
// rescale: ChannelPad (the ResNet shortcut's zero channels), Rescale
// (x·a + b, e.g. the ResNet model's x/128 − 1), and PoolPadShortcut (TF
// ResNet v1's shortcut when filters change: average pool then zero-pad
// channels by (Out − In)/2 on both sides; identity when In == Out, S == 1).
#pragma once

#include <cstddef>
#include <ratio>
#include <stdexcept>
#include <type_traits>
#include <utility>

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
      in_place_ = std::exchange(expect_in_place_, false);
      if (in_place_) {  // the pool before it wrote x's channels into y_ (padded_target)
        const detail::PaddedInput w = std::exchange(written_, detail::PaddedInput{});
        if (w.of != x.data() || w.at != static_cast<const void*>(y_.data() + Before) ||
            y_.size() != s.n * (s.c + Before + After) * s.h * s.w)
          throw std::logic_error("layer '" + name_ +
                                 "': its input was to be written into its output in place");
        return y_;
      }
      ensure_shape(y_, {s.n, s.c + Before + After, s.h, s.w}, fmt_);
      op_.forward(*rc.device, geom_, Before, After, x.data(), y_.data());
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if (!this->need_dx(rc)) return dx_;
      if (in_place_) return dy;  // the pool before it reads its channels of dy in place
      ensure_shape(dx_, geom_.shape(), fmt_);
      op_.backward(*rc.device, geom_, Before, After, dy.data(), dx_.data());
      return dx_;
    }

    // The average pool before it writes its output into this layer's
    // output in place (pool_into_pad; backend_traits<B>::pool_pad_in_place): the padding channels zeroed
    // once per buffer, the pool's channels written by the pool, no pass
    // here; backward hands dy on as it is, and the pool reads its channels.
    /// For a batch of `n`: the output sized, its padding zeroed (where this
    /// buffer was not zeroed before), and where the pool writes (channel
    /// Before of the first pixel; pixels padded_channels() apart). The next forward
    /// then checks that the pool wrote there (`written()`).
    T* padded_target(RunContext<B, T>& rc, std::size_t n) {
      if constexpr (backend_traits<B>::pool_pad_in_place) {
        const Shape out{n, in_.c + Before + After, in_.h, in_.w};
        ensure_shape(y_, out, fmt_);
        if (zeroed_ != y_.data() || zeroed_n_ != n) {
          op_.zero_pads(*rc.device, ChannelGeom::make(fmt_, Shape{n, in_.c, in_.h, in_.w}), Before, After,
                        y_.data());
          zeroed_ = y_.data();
          zeroed_n_ = n;
        }
        expect_in_place_ = true;
        return y_.data() + Before;
      } else {
        (void)rc, (void)n;
        throw std::logic_error("layer '" + name_ + "': an in-place pad on a backend without it");
      }
    }
    /// One node in a step plan (nn/plan.hpp); in training, with the hook
    /// the training executor's pool_into_pad uses (padded_target).
    int emit(plan::Builder& b, int in, RunContext<B, T>& rc) {
      const int t = b.node(name_, kind, {in}, Shape{1, in_.c + Before + After, in_.h, in_.w});
      if (rc.training()) {
        plan::LayerRun<B, T> r;
        r.forward = [this](const Tensor<T>& x, RunContext<B, T>& c, plan::Links<T>&) -> const Tensor<T>& {
          return forward(x, c);
        };
        r.backward = [this](const Tensor<T>& dy, RunContext<B, T>& c, plan::Links<T>&) -> const Tensor<T>& {
          return backward(dy, c);
        };
        r.pair.pad_target = [this](RunContext<B, T>& c, std::size_t n) {
          T* dst = padded_target(c, n);
          return plan::PadTarget<T>{dst, padded_channels(), pad_before(), written()};
        };
        b.producer(t).run = std::move(r);
      }
      return t;
    }
    std::size_t padded_channels() const { return in_.c + Before + After; }
    static constexpr std::size_t pad_before() { return std::size_t(Before); }
    detail::PaddedInput* written() { return &written_; }
    /// Forwards whose input was written in place (tests).
    bool last_in_place() const { return in_place_; }

   private:
    ops::ChannelPad<B, T> op_;
    ChannelGeom geom_;
    bool expect_in_place_ = false, in_place_ = false;
    detail::PaddedInput written_;
    const T* zeroed_ = nullptr;  // the buffer whose padding is zero (padded_target)
    std::size_t zeroed_n_ = 0;
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
