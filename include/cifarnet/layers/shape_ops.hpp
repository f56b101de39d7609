// cifarnet/layers/shape_ops.hpp — parameter-free layers that reshape or
// rescale: ChannelPad (the ResNet shortcut's zero channels), Rescale
// (x·a + b, e.g. the ResNet model's x/128 − 1), and PoolPadShortcut (TF
// ResNet v1's shortcut when filters change: average pool then zero-pad
// channels by (Out − In)/2 on both sides; identity when In == Out, S == 1).
#pragma once

#include <algorithm>
#include <cstring>
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
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>&) {
      const Shape s = detail::check_input(name_, in_, x, fmt_);
      n_ = s.n;
      const Shape o{s.n, s.c + Before + After, s.h, s.w};
      ensure_shape(y_, o, fmt_);
      std::fill(y_.begin(), y_.end(), T(0));
      const std::size_t hw = s.h * s.w, C = s.c, OC = o.c;
      for (std::size_t n = 0; n < s.n; ++n) {
        const T* in = x.data() + n * C * hw;
        T* out = y_.data() + n * OC * hw;
        if (fmt_ == DataFormat::NCHW)
          std::copy(in, in + C * hw, out + Before * hw);
        else
          for (std::size_t i = 0; i < hw; ++i) std::copy(in + i * C, in + (i + 1) * C, out + i * OC + Before);
      }
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>&) {
      if (!down_) return dx_;
      const Shape s{n_, in_.c, in_.h, in_.w};
      ensure_shape(dx_, s, fmt_);
      const std::size_t hw = s.h * s.w, C = s.c, OC = C + Before + After;
      for (std::size_t n = 0; n < s.n; ++n) {
        const T* g = dy.data() + n * OC * hw;
        T* out = dx_.data() + n * C * hw;
        if (fmt_ == DataFormat::NCHW)
          std::copy(g + Before * hw, g + (Before + C) * hw, out);
        else
          for (std::size_t i = 0; i < hw; ++i)
            std::copy(g + i * OC + Before, g + i * OC + Before + C, out + i * C);
      }
      return dx_;
    }

   private:
    std::size_t n_ = 0;
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
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>&) {
      detail::check_input(name_, in_, x, fmt_);
      if (y_.shape() != x.shape()) y_.resize(x.shape());
      const T a = T(double(Mul::num) / double(Mul::den)), b = T(double(Add::num) / double(Add::den));
      const T* px = x.data();
      T* py = y_.data();
      const long n = long(x.size());
#pragma omp parallel for simd schedule(static)
      for (long i = 0; i < n; ++i) py[i] = px[i] * a + b;
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>&) {
      if (!down_) return dx_;
      if (dx_.shape() != dy.shape()) dx_.resize(dy.shape());
      const T a = T(double(Mul::num) / double(Mul::den));
      const T* pg = dy.data();
      T* pd = dx_.data();
      const long n = long(dy.size());
#pragma omp parallel for simd schedule(static)
      for (long i = 0; i < n; ++i) pd[i] = pg[i] * a;
      return dx_;
    }

   private:
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
