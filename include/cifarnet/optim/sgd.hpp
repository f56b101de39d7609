// cifarnet/optim/sgd.hpp — plain gradient descent (tf.train.GradientDescentOptimizer).
//
// Update, as TF's ApplyGradientDescent kernel: var -= grad * lr, with lr
// cast to the parameter type. No state. Works over the selected trainable
// parameters of a Parameters<T> arena (all of them by default); the learning
// rate is passed to every step, usually from a schedule.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "cifarnet/core/params.hpp"
#include "cifarnet/optim/layout.hpp"
#include "cifarnet/optim/select.hpp"
#include "cifarnet/optim/state.hpp"

namespace cifarnet::optim {

/// Options of GradientDescent (TF: GradientDescentOptimizer).
class GradientDescentOptions {
 public:
  /// The optimizer's name in error messages.
  GradientDescentOptions& name(std::string n) {
    name_ = std::move(n);
    return *this;
  }
  const std::string& name() const { return name_; }
  void validate() const {
    if (name_.empty()) throw ConfigError("GradientDescentOptions: option 'name' must not be empty");
  }

 private:
  std::string name_ = "GradientDescent";
};

/// var -= lr * grad over the selected trainable parameters.
template <class T = float>
class GradientDescent {
 public:
  using Scalar = T;
  using Options = GradientDescentOptions;
  static constexpr bool is_optimizer = true;

  explicit GradientDescent(const Parameters<T>& params, Options opts = {}, const Selection& train = {})
      : opts_(std::move(opts)) {
    opts_.validate();
    layout_ = detail::Layout::trainable(params, train);
  }

  /// One update with learning rate `lr` (finite, >= 0).
  void step(Parameters<T>& params, double lr) {
    layout_.check(params, opts_.name());
    const T a = detail::checked_lr<T>(lr, opts_.name());
    detail::kernels(params).sgd(layout_.runs(), params.values().data(), params.grads().data(), a);
  }

  /// No state: f is never called.
  template <class F>
  void visit_state(F&&) {}

  const Options& options() const { return opts_; }

 private:
  Options opts_;
  detail::Layout layout_;
};

}  // namespace cifarnet::optim
