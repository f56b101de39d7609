// cifarnet/optim/momentum.hpp — momentum SGD with TensorFlow's semantics
// (tf.train.MomentumOptimizer, kernel ApplyMomentum).
//
//   accum = accum * momentum + grad
//   var  -= accum * lr                              (use_nesterov = false)
//   var  -= grad * lr + accum * momentum * lr       (use_nesterov = true)
// with lr and momentum cast to the parameter type. The accumulator slot
// "<param>/Momentum" starts at zero and is arena-shaped (same offsets as the
// values); only the selected parameters' slots are updated and exposed. The
// update is one pass of the arena's backend kernels (ops::Arena).
#pragma once

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

/// Options of Momentum: `MomentumOptions().momentum(0.9).nesterov(true)`.
class MomentumOptions {
 public:
  /// Momentum coefficient (default 0.9, the ResNet recipe); finite and >= 0.
  MomentumOptions& momentum(double m) {
    momentum_ = m;
    return *this;
  }
  /// TF's use_nesterov.
  MomentumOptions& nesterov(bool on) {
    nesterov_ = on;
    return *this;
  }
  /// Slot name suffix, TF's optimizer name (default "Momentum").
  MomentumOptions& name(std::string n) {
    name_ = std::move(n);
    return *this;
  }
  double momentum() const { return momentum_; }
  bool nesterov() const { return nesterov_; }
  const std::string& name() const { return name_; }

  void validate() const {
    detail::require(std::isfinite(momentum_) && momentum_ >= 0, "MomentumOptions", "momentum",
                    "must be finite and >= 0", momentum_);
    if (name_.empty()) throw ConfigError("MomentumOptions: option 'name' must not be empty");
  }

 private:
  double momentum_ = 0.9;
  bool nesterov_ = false;
  std::string name_ = "Momentum";
};

/// Momentum SGD over the selected trainable parameters.
template <class T = float>
class Momentum {
 public:
  using Scalar = T;
  using Options = MomentumOptions;
  static constexpr bool is_optimizer = true;

  explicit Momentum(const Parameters<T>& params, Options opts = {}, const Selection& train = {})
      : opts_(std::move(opts)) {
    opts_.validate();
    layout_ = detail::Layout::trainable(params, train);
    accum_.resize(layout_.buffer_size());
    held_ = detail::kernels(params).adopt_state(accum_.data(), accum_.size());  // on the GPU beside the arena
  }
  // A copy would share the slot's device mirror but not its host buffer.
  Momentum(const Momentum&) = delete;
  Momentum& operator=(const Momentum&) = delete;
  Momentum(Momentum&&) noexcept = default;
  Momentum& operator=(Momentum&&) noexcept = default;

  /// One update with learning rate `lr` (finite, >= 0).
  void step(Parameters<T>& params, double lr) {
    layout_.check(params, opts_.name());
    const T a = detail::checked_lr<T>(lr, opts_.name());
    const T m = T(opts_.momentum());
    detail::kernels(params).momentum(layout_.runs(), params.values().data(), accum_.data(),
                                     params.grads().data(), a, m, opts_.nesterov());
  }

  /// f(name, data, shape) for each "<param>/<name>" accumulator.
  template <class F>
  void visit_state(F&& f) {
    for (const auto& e : layout_.entries()) f(e.name + "/" + opts_.name(), accum_.data() + e.offset, e.shape);
  }

  /// The accumulator of a trained parameter, or nullptr.
  T* accumulator(const std::string& param) {
    const auto* e = layout_.find(param);
    return e ? accum_.data() + e->offset : nullptr;
  }

  const Options& options() const { return opts_; }

 private:
  Options opts_;
  detail::Layout layout_;
  cifarnet::detail::AlignedBuffer<T> accum_;
  std::shared_ptr<void> held_;  // the backend's hold on accum_ (ArenaKernels::adopt_state); goes first
};

}  // namespace cifarnet::optim
