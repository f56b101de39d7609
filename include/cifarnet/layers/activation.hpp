// cifarnet/layers/activation.hpp — element-wise activations: ReLU (backward
// from the output, y > 0) and GELU (exact erf form y = x·Φ(x), PyTorch's
// nn.GELU() default; backward from the input, so the layer keeps a pointer
// to x: the Node contract keeps x alive and unchanged until backward).
#pragma once

#include "cifarnet/layers/layer.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

namespace detail {
/// Which tensor an activation's backward op reads besides dy.
enum class GradFrom { Output, Input };

/// The node of an element-wise activation computed by ops::Op<B, T>
/// (forward(dev, n, x, y), backward(dev, n, x-or-y, dy, dx)).
template <template <class, class> class Op, GradFrom From, class B, class T>
class ActivationNode : NodeBase<T> {
  using B_ = NodeBase<T>;
  using B_::dx_, B_::down_, B_::fmt_, B_::in_, B_::name_, B_::y_;

 public:
  Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
    this->bind(in, scope, ctx);
    return in;
  }
  const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
    check_input(name_, in_, x, fmt_);
    if (y_.shape() != x.shape()) y_.resize(x.shape());
    x_ = &x;
    op_.forward(*rc.device, x.size(), x.data(), y_.data());
    return y_;
  }
  const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
    if (!this->need_dx(rc)) return dx_;
    if (dx_.shape() != dy.shape()) dx_.resize(dy.shape());
    const T* saved = From == GradFrom::Output ? y_.data() : x_->data();
    op_.backward(*rc.device, dy.size(), saved, dy.data(), dx_.data());
    return dx_;
  }

 private:
  Op<B, T> op_;
  const Tensor<T>* x_ = nullptr;
};
}  // namespace detail

struct ReLU : LayerBase {
  static constexpr const char* kind = "relu";
  template <class B, class T>
  using Node = detail::ActivationNode<ops::Relu, detail::GradFrom::Output, B, T>;
};

struct GELU : LayerBase {
  static constexpr const char* kind = "gelu";
  template <class B, class T>
  using Node = detail::ActivationNode<ops::Gelu, detail::GradFrom::Input, B, T>;
};

}  // namespace cifarnet
