// cifarnet/layers/tap.hpp — named taps: read an intermediate activation and
// inject a gradient there (style transfer's content and style losses).
//
// Tap<Tag> passes its input through unchanged (no copy). The model records
// the activation under Tag::name (Model::activation(name)); in backward, a
// gradient set with Model::tap_gradient(name) is added to the gradient that
// flows back through the tap. Taps hold no parameters.
#pragma once

#include <map>
#include <string>

#include "cifarnet/layers/layer.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

template <class Tag>
struct Tap : LayerBase {
  static constexpr const char* kind = "tap";
  static constexpr const char* fixed_name = Tag::name;
  static constexpr bool keeps_input = true;  // Model::activation reads it after the forward

  template <class B, class T>
  class Node {
   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      if (!ctx.taps) throw Error("Tap '" + scope.prefix() + "' built outside a Model");
      if (ctx.taps->count(Tag::name))
        throw ConfigError(std::string("two taps are named '") + Tag::name + "'");
      slot_ = &(*ctx.taps)[Tag::name];
      slot_->shape = in;
      return in;
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>&) {
      slot_->activation = &x;
      return x;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if (!slot_->has_grad) return dy;
      if (slot_->grad.shape() != dy.shape())
        throw ShapeError(std::string("tap '") + Tag::name +
                         "': injected gradient shape differs from the activation's");
      if (dx_.shape() != dy.shape()) dx_.resize(dy.shape());
      add_.add(*rc.device, dy.size(), dy.data(), slot_->grad.data(), dx_.data(), false);
      return dx_;
    }

   private:
    TapSlot<T>* slot_ = nullptr;
    ops::Eltwise<B, T> add_;
    Tensor<T> dx_;
  };
};

}  // namespace cifarnet
