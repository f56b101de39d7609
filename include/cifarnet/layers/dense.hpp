// cifarnet/layers/dense.hpp — fully connected layer and Flatten.
//
// Dense<In, Out, Bias>: y = x·W (+ b with WithBias, the default) on flat inputs (n, In, 1, 1) — put
// Flatten or GlobalAvgPool before it. In = 0 infers the input size.
// Parameters: `weights` (In, Out), Glorot-uniform (TF's default), `biases`
// (Out), zeros. Flatten reshapes (n, c, h, w) to (n, c·h·w, 1, 1) in memory
// order: c·h·w for NCHW, h·w·c for NHWC (TF's order).
#pragma once

#include <algorithm>
#include <utility>

#include "cifarnet/layers/layer.hpp"
#include "cifarnet/layers/options.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

template <int In, int Out, auto BiasOpt = WithBias>
struct Dense : LayerBase {
  static_assert(detail::BiasOption<BiasOpt>::valid,
                "cifarnet: Dense<In, Out, Bias>: Bias must be WithBias or NoBias (not a bool).");
  static_assert(In >= 0, "cifarnet: Dense<In, Out>: In must be >= 0 (0 = inferred from the input).");
  static_assert(Out > 0, "cifarnet: Dense<In, Out>: Out must be positive.");
  static constexpr const char* kind = "dense";
  static constexpr int in_channels = In == 0 ? -1 : In;
  static constexpr int out_channels(int) { return Out; }
  static constexpr bool Bias = detail::BiasOption<BiasOpt>::on;

  template <class B, class T>
  class Node : detail::NodeBase<T> {
    using B_ = detail::NodeBase<T>;
    using B_::dx_, B_::down_, B_::fmt_, B_::in_, B_::name_, B_::y_;

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      this->bind(in, scope, ctx);
      if (in.h != 1 || in.w != 1)
        throw ShapeError("layer '" + name_ + "' (Dense) expects a flat input [n, features, 1, 1] but got " +
                         in.str() + "; put Flatten or GlobalAvgPool before it");
      if (In != 0 && in.c != std::size_t(In))
        throw ShapeError("layer '" + name_ + "' (Dense) expects " + std::to_string(In) +
                         " input features but the input shape is " + in.str());
      w_ = ctx.add_param(scope, "weights", {in.c, std::size_t(Out)}, Initializer::glorot_uniform());
      if constexpr (Bias) b_ = ctx.add_param(scope, "biases", {std::size_t(Out)}, Initializer::zeros());
      return {in.n, std::size_t(Out), 1, 1};
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      const Shape s = detail::check_input(name_, in_, x, fmt_);
      n_ = s.n;
      ensure_shape(y_, {s.n, std::size_t(Out), 1, 1}, fmt_);
      x_ = &x;
      const Parameters<T>& P = *rc.params;
      op_.forward(*rc.device, n_, in_.c, Out, x.data(), P.value(w_), Bias ? P.value(b_) : nullptr, y_.data());
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if (rc.param_grads)
        op_.backward_weights(*rc.device, n_, in_.c, Out, x_->data(), dy.data(), rc.params->grad(w_),
                             Bias ? rc.params->grad(b_) : nullptr);
      if (!this->need_dx(rc)) return dx_;
      ensure_shape(dx_, {n_, in_.c, 1, 1}, fmt_);
      op_.backward_data(*rc.device, n_, in_.c, Out, dy.data(), std::as_const(*rc.params).value(w_),
                        dx_.data());
      return dx_;
    }

   private:
    ops::Dense<B, T> op_;
    std::size_t n_ = 0, w_ = 0, b_ = 0;
    const Tensor<T>* x_ = nullptr;
  };
};

struct Flatten : LayerBase {
  static constexpr const char* kind = "flatten";
  static constexpr int out_channels(int) { return -1; }

  template <class B, class T>
  class Node : detail::NodeBase<T> {
    using B_ = detail::NodeBase<T>;
    using B_::dx_, B_::down_, B_::fmt_, B_::in_, B_::name_, B_::y_;

   public:
    Shape build(const Shape& in, Scope& scope, BuildContext<T>& ctx) {
      this->bind(in, scope, ctx);
      return {in.n, in.per_example(), 1, 1};
    }
    const Tensor<T>& forward(const Tensor<T>& x, RunContext<B, T>& rc) {
      const Shape s = detail::check_input(name_, in_, x, fmt_);
      n_ = s.n;
      ensure_shape(y_, {s.n, s.per_example(), 1, 1}, fmt_);
      copy(*rc.device, x, y_);
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if (!this->need_dx(rc)) return dx_;
      ensure_shape(dx_, {n_, in_.c, in_.h, in_.w}, fmt_);
      copy(*rc.device, dy, dx_);
      return dx_;
    }

   private:
    // The same elements in a new shape: a host copy, or (a backend whose
    // tensors are device memory) the backend's affine op as a copy: x·1 +
    // (-0) is x for every x, -0 included (+0 would turn -0 into +0).
    void copy(Device<B>& dev, const Tensor<T>& from, Tensor<T>& to) {
      if constexpr (backend_traits<B>::host_memory)
        std::copy(from.data(), from.data() + from.size(), to.data());
      else
        copy_.affine(dev, from.size(), from.data(), T(1), -T(0), to.data());
    }
    ops::Eltwise<B, T> copy_;
    std::size_t n_ = 0;
  };
};

}  // namespace cifarnet
