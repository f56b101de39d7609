// cifarnet/optim/ema.hpp — exponential moving averages with TensorFlow's
// semantics (tf.train.ExponentialMovingAverage).
//
// ExponentialMovingAverage<T> keeps a shadow copy of the selected trainable
// parameters and, when include_state (the default, DESIGN.md principle 4),
// of the non-trainable state (BN moving statistics). Shadows start as a copy
// of the values at construction ("<param>/ExponentialMovingAverage"). Each
// apply() does, for every shadow,
//   shadow -= (shadow - value) * (1 - decay)
// where decay, as in TF, is a float32 value: decay, or with num_updates n
// min(decay, (1 + n) / (10 + n)) computed in float32, and 1 - decay is then
// cast to T. Call apply() after the optimizer step with the incremented
// global step, as TF's cifar10.py does. swap_in() returns a guard that swaps
// the averages into the arena (evaluate with them) and swaps back when it is
// destroyed; swapping is exact, so training resumes bit for bit.
//
// ScalarMovingAverage<T> averages a reported scalar such as the loss the way
// TF averages a tensor that is not a variable: the shadow starts at zero
// (optionally zero-debiased), named "<tensor>/<ema name>" ("total_loss/avg"
// for the tutorial's ExponentialMovingAverage(0.9, name='avg')).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/optim/layout.hpp"
#include "cifarnet/optim/select.hpp"
#include "cifarnet/optim/state.hpp"

namespace cifarnet::optim {

/// Options of ExponentialMovingAverage / ScalarMovingAverage.
class ExponentialMovingAverageOptions {
 public:
  /// `decay` in [0, 1], e.g. 0.9999 (cifar10.py's MOVING_AVERAGE_DECAY).
  explicit ExponentialMovingAverageOptions(double decay) : decay_(decay) {}
  ExponentialMovingAverageOptions& decay(double d) {
    decay_ = d;
    return *this;
  }
  /// Also average the non-trainable state (BN moving statistics); default true.
  ExponentialMovingAverageOptions& include_state(bool on) {
    include_state_ = on;
    return *this;
  }
  /// Shadow name suffix, TF's EMA name (default "ExponentialMovingAverage").
  ExponentialMovingAverageOptions& name(std::string n) {
    name_ = std::move(n);
    return *this;
  }
  /// TF's zero_debias, for ScalarMovingAverage only (TF ignores it for variables).
  ExponentialMovingAverageOptions& zero_debias(bool on) {
    zero_debias_ = on;
    return *this;
  }
  double decay() const { return decay_; }
  bool include_state() const { return include_state_; }
  const std::string& name() const { return name_; }
  bool zero_debias() const { return zero_debias_; }

  void validate() const {
    detail::require(decay_ >= 0 && decay_ <= 1, "ExponentialMovingAverageOptions", "decay",
                    "must be in [0, 1]", decay_);
    if (name_.empty()) throw ConfigError("ExponentialMovingAverageOptions: option 'name' must not be empty");
  }

 private:
  double decay_;
  bool include_state_ = true;
  std::string name_ = "ExponentialMovingAverage";
  bool zero_debias_ = false;
};

namespace detail {
/// TF's decay as float32: min(decay, (1 + n) / (10 + n)) when n is given.
inline float ema_decay(double decay, std::optional<std::int64_t> num_updates) {
  float d = float(decay);
  if (num_updates) {
    if (*num_updates < 0)
      throw ConfigError("ExponentialMovingAverage: num_updates must be >= 0, got " +
                        std::to_string(*num_updates));
    const float n = float(*num_updates);
    d = std::min(d, (1.0f + n) / (10.0f + n));
  }
  return d;
}
}  // namespace detail

/// Moving averages of the parameters (and by default the state buffer).
template <class T = float>
class ExponentialMovingAverage {
 public:
  using Scalar = T;
  using Options = ExponentialMovingAverageOptions;

  /// Shadows start as copies of the current values: build it after the
  /// parameters are initialized (or call reset()).
  ExponentialMovingAverage(const Parameters<T>& params, Options opts, const Selection& vars = {})
      : opts_(std::move(opts)) {
    opts_.validate();
    if (opts_.zero_debias())
      throw ConfigError(
          "ExponentialMovingAverageOptions: option 'zero_debias' applies to ScalarMovingAverage only "
          "(TF ignores it for variables)");
    train_ = detail::Layout::trainable(params, vars);
    if (opts_.include_state()) state_ = detail::Layout::state(params);
    shadow_.resize(train_.buffer_size());
    shadow_state_.resize(state_.buffer_size());
    reset(params);
    auto& k = detail::kernels(params);  // the shadows on the GPU beside a device-resident arena
    held_ = k.adopt_state(shadow_.data(), shadow_.size());
    held_state_ = k.adopt_state(shadow_state_.data(), shadow_state_.size());
  }

  ExponentialMovingAverage(const ExponentialMovingAverage&) = delete;
  ExponentialMovingAverage& operator=(const ExponentialMovingAverage&) = delete;

  /// Shadows := current values.
  void reset(const Parameters<T>& params) {
    check(params);
    auto& k = detail::kernels(params);
    k.copy(train_.runs(), params.values().data(), shadow_.data());
    k.copy(state_.runs(), params.state().data(), shadow_state_.data());
  }

  /// One update with the fixed decay.
  void apply(const Parameters<T>& params) { update(params, std::nullopt); }
  /// One update with decay min(decay, (1 + n) / (10 + n)), n = num_updates
  /// (usually the global step after the optimizer step).
  void apply(const Parameters<T>& params, std::int64_t num_updates) { update(params, num_updates); }

  /// The decay an apply() with these num_updates uses (float32, as TF).
  float decay(std::optional<std::int64_t> num_updates = std::nullopt) const {
    return detail::ema_decay(opts_.decay(), num_updates);
  }

  /// Swaps the averages into the arena until the guard is destroyed (or
  /// restore() is called); the trained values are kept in the shadows
  /// meanwhile and come back exactly. apply() while swapped in throws.
  class SwapGuard {
   public:
    SwapGuard(SwapGuard&& o) noexcept : ema_(o.ema_), params_(o.params_) { o.ema_ = nullptr; }
    SwapGuard(const SwapGuard&) = delete;
    SwapGuard& operator=(const SwapGuard&) = delete;
    SwapGuard& operator=(SwapGuard&&) = delete;
    ~SwapGuard() { restore(); }
    /// Swaps the trained values back now.
    void restore() noexcept {
      if (ema_) ema_->swap(*params_);
      ema_ = nullptr;
    }

   private:
    friend class ExponentialMovingAverage;
    SwapGuard(ExponentialMovingAverage* e, Parameters<T>* p) : ema_(e), params_(p) {}
    ExponentialMovingAverage* ema_;
    Parameters<T>* params_;
  };

  [[nodiscard]] SwapGuard swap_in(Parameters<T>& params) {
    check(params);
    if (swapped_) throw Error("ExponentialMovingAverage: averages are already swapped in");
    swap(params);
    return SwapGuard(this, &params);
  }
  bool swapped() const { return swapped_; }

  /// Writes the averages into the arena (e.g. to export averaged weights).
  void copy_to(Parameters<T>& params) const {
    check(params);
    if (swapped_) throw Error("ExponentialMovingAverage: copy_to while the averages are swapped in");
    auto& k = detail::kernels(params);
    k.copy(train_.runs(), shadow_.data(), params.values().data());
    k.copy(state_.runs(), shadow_state_.data(), params.state().data());
  }

  /// The shadow of a parameter (trainable or state), or nullptr when it is not averaged.
  const T* average(const std::string& param) const {
    if (const auto* e = train_.find(param)) return shadow_.data() + e->offset;
    if (const auto* e = state_.find(param)) return shadow_state_.data() + e->offset;
    return nullptr;
  }

  /// f(name, data, shape) for every "<param>/<name>" shadow, trainable first.
  template <class F>
  void visit_state(F&& f) {
    for (const auto& e : train_.entries()) f(e.name + "/" + opts_.name(), shadow_.data() + e.offset, e.shape);
    for (const auto& e : state_.entries())
      f(e.name + "/" + opts_.name(), shadow_state_.data() + e.offset, e.shape);
  }

  const Options& options() const { return opts_; }

 private:
  void check(const Parameters<T>& params) const {
    train_.check(params, "ExponentialMovingAverage");
    if (opts_.include_state()) state_.check(params, "ExponentialMovingAverage");
  }

  void update(const Parameters<T>& params, std::optional<std::int64_t> n) {
    check(params);
    if (swapped_) throw Error("ExponentialMovingAverage: apply() while the averages are swapped in");
    const T omd = T(1.0f - detail::ema_decay(opts_.decay(), n));
    auto& k = detail::kernels(params);
    k.ema(train_.runs(), shadow_.data(), params.values().data(), omd);
    k.ema(state_.runs(), shadow_state_.data(), params.state().data(), omd);
  }

  void swap(Parameters<T>& params) noexcept {
    auto& k = detail::kernels(params);
    k.swap(train_.runs(), params.values().data(), shadow_.data());
    k.swap(state_.runs(), params.state().data(), shadow_state_.data());
    swapped_ = !swapped_;
  }

  Options opts_;
  detail::Layout train_, state_;
  cifarnet::detail::AlignedBuffer<T> shadow_, shadow_state_;
  std::shared_ptr<void> held_, held_state_;  // the backend's holds (ArenaKernels::adopt_state); go first
  bool swapped_ = false;
};

/// A moving average of a reported scalar (TF's average of a non-variable
/// tensor: the shadow starts at 0).
template <class T = float>
class ScalarMovingAverage {
 public:
  using Scalar = T;

  /// `tensor`: the averaged quantity's name ("total_loss"); options as for
  /// ExponentialMovingAverage (the tutorial: decay 0.9, name "avg").
  explicit ScalarMovingAverage(std::string tensor, ExponentialMovingAverageOptions opts =
                                                       ExponentialMovingAverageOptions(0.9).name("avg"))
      : tensor_(std::move(tensor)), opts_(std::move(opts)) {
    opts_.validate();
    if (tensor_.empty()) throw ConfigError("ScalarMovingAverage: the tensor name must not be empty");
  }

  /// Folds in x with the fixed decay; returns the new average.
  T apply(double x) { return update(x, std::nullopt); }
  /// Folds in x with decay min(decay, (1 + n) / (10 + n)).
  T apply(double x, std::int64_t num_updates) { return update(x, num_updates); }
  T value() const { return value_; }

  /// f(name, data, shape): "<tensor>/<name>", and with zero_debias also
  /// "<tensor>/<name>/biased" and "<tensor>/<name>/local_step" (TF's names).
  template <class F>
  void visit_state(F&& f) {
    const std::vector<std::size_t> scalar;
    const std::string base = tensor_ + "/" + opts_.name();
    f(base, &value_, scalar);
    if (opts_.zero_debias()) {
      f(base + "/biased", &biased_, scalar);
      f(base + "/local_step", &local_step_, scalar);
    }
  }

 private:
  CIFARNET_NO_FP_CONTRACT T update(double x, std::optional<std::int64_t> n) {
    CIFARNET_NO_FP_CONTRACT_BODY
    const T omd = T(1.0f - detail::ema_decay(opts_.decay(), n));
    const T v = T(x);
    if (!opts_.zero_debias()) {
      value_ -= (value_ - v) * omd;
    } else {  // TF _zero_debias
      biased_ -= (biased_ - v) * omd;
      local_step_ += T(1);
      value_ = biased_ / (T(1) - std::pow(T(1) - omd, local_step_));
    }
    return value_;
  }

  std::string tensor_;
  ExponentialMovingAverageOptions opts_;
  T value_ = 0, biased_ = 0, local_step_ = 0;
};

}  // namespace cifarnet::optim
