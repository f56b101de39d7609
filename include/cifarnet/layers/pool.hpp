// cifarnet/layers/pool.hpp — max and average pooling with TF semantics.
//
// MaxPool2d<K, S, P> and AvgPool2d<K, S, P>: K×K window, stride S, padding P
// (SAME by default). With SAME, padded positions never win a max and are
// excluded from the average (TF's avg_pool). GlobalAvgPool averages each
// channel over h·w and returns (n, c, 1, 1).
#pragma once

#include "cifarnet/layers/layer.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

template <PoolKind Kind, int K, int S, Padding P = Padding::Same>
struct Pool2d : LayerBase {
  static_assert(K > 0 && S > 0, "cifarnet: Pool2d<K, S>: window K and stride S must be positive.");
  static_assert(P != Padding::Explicit, "cifarnet: Pool2d supports Padding::Same and Padding::Valid.");
  static constexpr const char* kind = Kind == PoolKind::Max ? "max_pool" : "avg_pool";

  template <class B, class T>
  class Node : detail::NodeBase<T> {
    using B_ = detail::NodeBase<T>;
    using B_::dx_, B_::down_, B_::fmt_, B_::in_, B_::name_, B_::y_;

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      this->bind(in, scope, ctx);
      geom_ = ConvGeom::make(fmt_, in, in.c, K, S, P);
      return {in.n, in.c, geom_.oh, geom_.ow};
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      const Shape s = detail::check_input(name_, in_, x, fmt_);
      geom_.n = s.n;
      ensure_shape(y_, {s.n, s.c, geom_.oh, geom_.ow}, fmt_);
      x_ = &x;
      op_.forward(*rc.device, geom_, Kind, rc.training(), x.data(), y_.data());
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if (!this->need_dx(rc)) return dx_;
      ensure_shape(dx_, geom_.in_shape(), fmt_);
      op_.backward(*rc.device, geom_, Kind, x_->data(), y_.data(), dy.data(), dx_.data());
      return dx_;
    }

   private:
    ops::Pool2d<B, T> op_;
    ConvGeom geom_;
    const Tensor<T>* x_ = nullptr;
  };
};

template <int K, int S, Padding P = Padding::Same>
using MaxPool2d = Pool2d<PoolKind::Max, K, S, P>;
template <int K, int S, Padding P = Padding::Same>
using AvgPool2d = Pool2d<PoolKind::Avg, K, S, P>;

/// Mean over h·w per channel: (n, c, h, w) -> (n, c, 1, 1).
struct GlobalAvgPool : LayerBase {
  static constexpr const char* kind = "global_pool";

  template <class B, class T>
  class Node : detail::NodeBase<T> {
    using B_ = detail::NodeBase<T>;
    using B_::dx_, B_::down_, B_::fmt_, B_::in_, B_::name_, B_::y_;

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      this->bind(in, scope, ctx);
      return {in.n, in.c, 1, 1};
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      const Shape s = detail::check_input(name_, in_, x, fmt_);
      geom_ = ChannelGeom::make(fmt_, s);
      ensure_shape(y_, {s.n, s.c, 1, 1}, fmt_);
      op_.forward(*rc.device, geom_, x.data(), y_.data());
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if (!this->need_dx(rc)) return dx_;
      ensure_shape(dx_, geom_.shape(), fmt_);
      op_.backward(*rc.device, geom_, dy.data(), dx_.data());
      return dx_;
    }

   private:
    ops::GlobalAvgPool<B, T> op_;
    ChannelGeom geom_;
  };
};

}  // namespace cifarnet
