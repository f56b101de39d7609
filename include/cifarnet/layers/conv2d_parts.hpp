// cifarnet/layers/conv2d_parts.hpp — what a Conv2d node is made of on every
// backend, and its forward and backward where the backend has nothing of
// its own for it.
//
// detail::ConvParts<B, T, L>: the op, the geometry, the parameters
// (`weights`, `biases` with bias), the kept input, and what every backend
// does the same (the build, the input check, whether weight gradients are
// wanted, the step-plan node). detail::ConvNode<B, T, L>: the node itself:
// here, for any backend (reference, CUDA), a plain forward and a backward of
// two passes through ops::Conv2d; a backend with more of its own for a
// convolution specializes it (oneDNN: layers/conv2d_onednn.hpp: the
// algorithm and precision, joint and bf16 backward passes, the own kernels,
// versioned weights). L is the Conv2d layer type (layers/conv2d.hpp), whose
// Node is a ConvNode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "cifarnet/layers/layer.hpp"
#include "cifarnet/layers/options.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet::detail {

template <class B, class T, class L>
class ConvParts : protected NodeBase<T> {
 protected:
  using NodeBase<T>::fmt_, NodeBase<T>::in_, NodeBase<T>::name_;
  static constexpr bool Bias = L::Bias;
  static constexpr std::size_t kOut = std::size_t(L::out_channels(0));

 public:
  Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
    this->bind(in, scope, ctx);
    if (L::in_channels > 0 && in.c != std::size_t(L::in_channels))
      throw ShapeError("layer '" + name_ + "' (Conv2d) expects " + std::to_string(L::in_channels) +
                       " input channels but the input shape is " + in.str());
    geom_ = ConvGeom::make(fmt_, in, kOut, L::kernel_size, L::stride, L::padding);
    const auto k = std::size_t(L::kernel_size);
    w_ = ctx.add_param(scope, "weights", {k, k, in.c, kOut}, Initializer::glorot_uniform());
    if (Bias) b_ = ctx.add_param(scope, "biases", {kOut}, Initializer::zeros());
    return {in.n, kOut, geom_.oh, geom_.ow};
  }

  /// Whether backward computes dx under `rc` (step plans).
  bool needs_input_gradient(const RunContext<B, T>& rc) const { return this->need_dx(rc); }
  /// The input of the last forward (null before one): which tensor's
  /// gradient this layer computes.
  const T* input_data() const { return x_ ? x_->data() : nullptr; }
  /// Elements of one image of the input and of the output.
  std::size_t in_image() const { return geom_.ic * geom_.ih * geom_.iw; }
  std::size_t out_image() const { return geom_.oc * geom_.oh * geom_.ow; }
  const ConvGeom& geometry() const { return geom_; }
  /// Where the weights' gradient goes under `rc` (HWIO), or null where
  /// none is wanted: for a layer that computes it in its own pass
  /// (ConvBatchNorm's bn_dx_into_conv_weight_gradient; no bias).
  T* weight_gradient_target(RunContext<B, T>& rc) const {
    return !Bias && rc.param_grads && rc.params->requires_grad(w_) ? rc.params->grad(w_) : nullptr;
  }
  /// The arena id of `weights` (layers/conv_bn.hpp folds batch norm into it).
  std::size_t weights_id() const { return w_; }

 protected:
  // What every forward does before the op: the input check, the batch
  // size, the kept input (for backward).
  void take_input(const Tensor<T>& x) {
    const Shape s = check_input(name_, in_, x, fmt_);
    geom_.n = s.n;
    x_ = &x;
  }
  // Weight gradients unless frozen (Model::set_weight_gradients) or none
  // of this layer's parameters requires one (Parameters::requires_grad).
  bool wants_grads(const RunContext<B, T>& rc) const {
    return rc.param_grads && (rc.params->requires_grad(w_) || (Bias && rc.params->requires_grad(b_)));
  }
  // Whether the bias alone requires a gradient: the weights' gradient (which
  // then keeps its last values, as Parameters::requires_grad says) is
  // skipped by the backends that can sum the bias's alone.
  bool wants_bias_grad_only(const RunContext<B, T>& rc) const {
    return Bias && rc.param_grads && rc.params->requires_grad(b_) && !rc.params->requires_grad(w_);
  }
  // The node in a step plan (nn/plan.hpp), with `why` the backend's own conv +
  // batch norm kernels do not take its geometry (empty: they do): what the
  // rules say about a standalone convolution.
  int emit_node(plan::Builder& b, int in, RunContext<B, T>& rc, const std::string& why) {
    const int t = b.node(name_, L::kind, {in}, geom_.out_shape(), L::plan_attrs());
    plan::Node& n = b.producer(t);
    n.facts[plan::facts::kOwnKernels] = why.empty() ? plan::Fact::yes() : plan::Fact::no(why);
    if (!rc.training()) {  // the plan executor runs it itself, with the epilogue the rules give it
      n.facts[plan::facts::kEpilogueConv] = plan::Fact::yes();
      n.facts[plan::facts::kOwnForward] = plan::own_forward_fact<B, T>(geom_, b.key());
      n.facts[plan::facts::kWinogradForward] = plan::winograd_forward_fact<B, T>(geom_, b.key());
      n.run = plan::ConvRun<B, T>{geom_, [this](RunContext<B, T>& c) {
                                    const Parameters<T>& p = *c.params;
                                    return plan::FoldedWeights<T>{p.value(w_), Bias ? p.value(b_) : nullptr,
                                                                  p.version(w_) + (Bias ? p.version(b_) : 0)};
                                  }};
    }
    return t;
  }

  ops::Conv2d<B, T> op_;
  ConvGeom geom_;
  std::size_t w_ = 0, b_ = 0;
  const Tensor<T>* x_ = nullptr;
};

/// A Conv2d node on a backend without more of its own for a convolution:
/// the op's forward, and its backward as a weight pass then a data pass.
template <class B, class T, class L>
class ConvNode : public ConvParts<B, T, L> {
  using Base = ConvParts<B, T, L>;
  using Base::b_, Base::Bias, Base::dx_, Base::fmt_, Base::geom_, Base::op_, Base::w_, Base::x_, Base::y_;

 public:
  /// `x_bf16`: a bf16 copy of x its writer made (backends with bf16
  /// convolutions read it; here it is not used).
  const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc, const std::uint16_t* x_bf16 = nullptr) {
    (void)x_bf16;
    this->take_input(x);
    ensure_shape(y_, geom_.out_shape(), fmt_);
    const Parameters<T>& params = *rc.params;
    op_.forward(*rc.device, geom_, x.data(), params.value(w_), Bias ? params.value(b_) : nullptr, y_.data());
    return y_;
  }
  /// forward() with the hand-overs of a training plan (plan::Links).
  const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc, plan::Links<T>& k) {
    return forward(x, rc, k.input_bf16);
  }

  const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
    const bool grads = this->wants_grads(rc), down = this->need_dx(rc);
    if (grads)
      op_.backward_weights(*rc.device, geom_, x_->data(), dy.data(), rc.params->grad(w_),
                           Bias ? rc.params->grad(b_) : nullptr);
    if (!down) return dx_;
    ensure_shape(dx_, geom_.in_shape(), fmt_);
    op_.backward_data(*rc.device, geom_, dy.data(), std::as_const(*rc.params).value(w_), dx_.data());
    return dx_;
  }

  /// One node in a step plan (nn/plan.hpp); no own conv + batch norm
  /// kernels on this backend.
  int emit(plan::Builder& b, int in, RunContext<B, T>& rc) {
    return this->emit_node(b, in, rc, "the backend has no own conv + batch norm kernels");
  }
};

}  // namespace cifarnet::detail
