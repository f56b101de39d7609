// cifarnet/layers/activation.hpp — ReLU. Backward uses the output (y > 0).
#pragma once

#include "cifarnet/layers/layer.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

struct ReLU : LayerBase {
  static constexpr const char* kind = "relu";

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
      op_.forward(*rc.device, x.size(), x.data(), y_.data());
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if (!down_) return dx_;
      if (dx_.shape() != dy.shape()) dx_.resize(dy.shape());
      op_.backward(*rc.device, dy.size(), y_.data(), dy.data(), dx_.data());
      return dx_;
    }

   private:
    ops::Relu<B, T> op_;
  };
};

}  // namespace cifarnet
