// cifarnet/optim/adam.hpp — Adam with TensorFlow 1.x semantics
// (tf.train.AdamOptimizer, kernel ApplyAdam).
//
// State: slots "<param>/Adam" (m) and "<param>/Adam_1" (v), zero at start and
// arena-shaped; scalars "beta1_power" and "beta2_power", starting at beta1
// and beta2 and multiplied by them after every step. One step, in the
// parameter type T, as TF's kernel:
//   alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
//   m += (g - m) * (1 - beta1)
//   v += (g*g - v) * (1 - beta2)
//   var -= m * alpha / (sqrt(v) + epsilon)
// i.e. bias correction folded into the step size, epsilon outside the
// correction ("epsilon hat"), as TF does. Defaults: beta1 0.9, beta2 0.999,
// epsilon 1e-8 (TF's).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/params.hpp"
#include "cifarnet/optim/layout.hpp"
#include "cifarnet/optim/select.hpp"
#include "cifarnet/optim/state.hpp"

namespace cifarnet::optim {

/// Options of Adam: `AdamOptions().beta1(0.9).beta2(0.999).epsilon(1e-8)`.
class AdamOptions {
 public:
  AdamOptions& beta1(double b) {
    beta1_ = b;
    return *this;
  }
  AdamOptions& beta2(double b) {
    beta2_ = b;
    return *this;
  }
  AdamOptions& epsilon(double e) {
    epsilon_ = e;
    return *this;
  }
  /// Slot name prefix, TF's optimizer name (default "Adam": slots "Adam", "Adam_1").
  AdamOptions& name(std::string n) {
    name_ = std::move(n);
    return *this;
  }
  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  double epsilon() const { return epsilon_; }
  const std::string& name() const { return name_; }

  void validate() const {
    detail::require(beta1_ >= 0 && beta1_ < 1, "AdamOptions", "beta1", "must be in [0, 1)", beta1_);
    detail::require(beta2_ >= 0 && beta2_ < 1, "AdamOptions", "beta2", "must be in [0, 1)", beta2_);
    detail::require(std::isfinite(epsilon_) && epsilon_ > 0, "AdamOptions", "epsilon",
                    "must be finite and > 0", epsilon_);
    if (name_.empty()) throw ConfigError("AdamOptions: option 'name' must not be empty");
  }

 private:
  double beta1_ = 0.9, beta2_ = 0.999, epsilon_ = 1e-8;
  std::string name_ = "Adam";
};

/// Adam over the selected trainable parameters.
template <class T = float>
class Adam {
 public:
  using Scalar = T;
  using Options = AdamOptions;
  static constexpr bool is_optimizer = true;

  explicit Adam(const Parameters<T>& params, Options opts = {}, const Selection& train = {})
      : opts_(std::move(opts)) {
    opts_.validate();
    layout_ = detail::Layout::trainable(params, train);
    m_.resize(layout_.buffer_size());
    v_.resize(layout_.buffer_size());
    held_m_ = detail::kernels(params).adopt_state(m_.data(), m_.size());  // on the GPU beside the arena
    held_v_ = detail::kernels(params).adopt_state(v_.data(), v_.size());
    beta1_power_ = T(opts_.beta1());
    beta2_power_ = T(opts_.beta2());
  }
  // A copy would share the slots' device mirrors but not their host buffers.
  Adam(const Adam&) = delete;
  Adam& operator=(const Adam&) = delete;
  Adam(Adam&&) noexcept = default;
  Adam& operator=(Adam&&) noexcept = default;

  /// One update with learning rate `lr` (finite, >= 0).
  void step(Parameters<T>& params, double lr) {
    layout_.check(params, opts_.name());
    const T lr_t = detail::checked_lr<T>(lr, opts_.name());
    const T b1 = T(opts_.beta1()), b2 = T(opts_.beta2()), eps = T(opts_.epsilon());
    const T alpha = lr_t * std::sqrt(T(1) - beta2_power_) / (T(1) - beta1_power_);
    const T omb1 = T(1) - b1, omb2 = T(1) - b2;
    detail::kernels(params).adam(layout_.runs(), params.values().data(), m_.data(), v_.data(),
                                 params.grads().data(), alpha, omb1, omb2, eps);
    beta1_power_ = beta1_power_ * b1;
    beta2_power_ = beta2_power_ * b2;
  }

  /// f(name, data, shape) for "<param>/Adam", "<param>/Adam_1" of every
  /// trained parameter, then "beta1_power" and "beta2_power" (scalars).
  template <class F>
  void visit_state(F&& f) {
    const std::string& nm = opts_.name();
    for (const auto& e : layout_.entries()) {
      f(e.name + "/" + nm, m_.data() + e.offset, e.shape);
      f(e.name + "/" + nm + "_1", v_.data() + e.offset, e.shape);
    }
    const std::vector<std::size_t> scalar;
    f(std::string("beta1_power"), &beta1_power_, scalar);
    f(std::string("beta2_power"), &beta2_power_, scalar);
  }

  /// First and second moment slots of a trained parameter, or nullptr.
  T* first_moment(const std::string& param) {
    const auto* e = layout_.find(param);
    return e ? m_.data() + e->offset : nullptr;
  }
  T* second_moment(const std::string& param) {
    const auto* e = layout_.find(param);
    return e ? v_.data() + e->offset : nullptr;
  }
  T beta1_power() const { return beta1_power_; }
  T beta2_power() const { return beta2_power_; }

  const Options& options() const { return opts_; }

 private:
  Options opts_;
  detail::Layout layout_;
  cifarnet::detail::AlignedBuffer<T> m_, v_;
  std::shared_ptr<void> held_m_, held_v_;  // the backend's holds (ArenaKernels::adopt_state); go first
  T beta1_power_ = 0, beta2_power_ = 0;
};

}  // namespace cifarnet::optim
