// cifarnet/layers/lrn.hpp — local response normalization, TensorFlow's form.
//
// Lrn<R, Bias, Alpha, Beta> with std::ratio constants (C++17 has no floating
// template arguments): y_c = x_c / (Bias + Alpha · Σ_{|j−c|≤R} x_j²)^Beta.
// Alpha is not divided by the window size (unlike Caffe/PyTorch).
// TutorialLrn is the classic CIFAR-10 CNN's lrn(4, 1.0, 0.001/9, 0.75).
#pragma once

#include <ratio>

#include "cifarnet/layers/layer.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {

template <int R, class Bias = std::ratio<1>, class Alpha = std::ratio<1>, class Beta = std::ratio<1, 2>>
struct Lrn : LayerBase {
  static_assert(R >= 0, "cifarnet: Lrn<R>: depth radius R must be >= 0.");
  static constexpr const char* kind = "norm";

  static LrnParams params() {
    LrnParams p;
    p.depth_radius = std::size_t(R);
    p.bias = double(Bias::num) / double(Bias::den);
    p.alpha = double(Alpha::num) / double(Alpha::den);
    p.beta = double(Beta::num) / double(Beta::den);
    return p;
  }

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
      const Shape s = detail::check_input(name_, in_, x, fmt_);
      geom_ = ChannelGeom::make(fmt_, s);
      ensure_shape(y_, s, fmt_);
      x_ = &x;
      op_.forward(*rc.device, geom_, params(), rc.training(), x.data(), y_.data());
      return y_;
    }
    const Tensor<T>& backward(const Tensor<T>& dy, RunContext<B, T>& rc) {
      if (!this->need_dx(rc)) return dx_;
      ensure_shape(dx_, geom_.shape(), fmt_);
      op_.backward(*rc.device, geom_, params(), x_->data(), y_.data(), dy.data(), dx_.data());
      return dx_;
    }

   private:
    ops::Lrn<B, T> op_;
    ChannelGeom geom_;
    const Tensor<T>* x_ = nullptr;
  };
};

/// tf.nn.lrn(x, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75) of the tutorial.
using TutorialLrn = Lrn<4, std::ratio<1>, std::ratio<1, 9000>, std::ratio<3, 4>>;

}  // namespace cifarnet
