// cifarnet/optim/schedules.hpp — learning rates as functions of the global step.
//
// Each schedule is a small value type with `double operator()(std::int64_t
// step) const`, validated when built (ConfigError naming the option), and
// can be stored type-erased in a Schedule. Semantics are TensorFlow's:
//  - piecewise_constant(boundaries, values): values[0] while step <=
//    boundaries[0], values[i] while boundaries[i-1] < step <= boundaries[i],
//    values.back() after the last boundary (tf.train.piecewise_constant).
//  - exponential_decay(lr, decay_steps, rate, staircase): lr *
//    rate^(step / decay_steps), the exponent floored when staircase.
//  - cosine_decay(lr, decay_steps, alpha): lr * ((1 - alpha) * 0.5 * (1 +
//    cos(pi * min(step, decay_steps) / decay_steps)) + alpha).
//  - polynomial_decay(lr, decay_steps, end_lr, power): (lr - end_lr) *
//    (1 - min(step, decay_steps) / decay_steps)^power + end_lr
//    (tf.train.polynomial_decay without cycle); power 1 is a linear decay,
//    to 0 with end_lr = 0 (the airbench recipe's schedules).
//  - linear_warmup(inner, warmup_steps, init_lr): init_lr + (inner(W) -
//    init_lr) * step / W while step < W, then inner(step) (TF Model Garden's
//    LinearWarmup: the inner schedule sees the unshifted global step).
// Arithmetic is in double; TF computes in float32, so a value may differ from
// TF's in the last float bit (piecewise_constant returns the given values
// exactly). A negative step is a ConfigError.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/optim/state.hpp"

namespace cifarnet::optim {

namespace detail {
inline void check_step(std::int64_t step, const char* who) {
  if (step < 0)
    throw ConfigError(std::string(who) + ": global step must be >= 0, got " + std::to_string(step));
}
inline void check_lr_option(double lr, const char* who, const char* option) {
  require(std::isfinite(lr) && lr >= 0, who, option, "must be finite and >= 0", lr);
}
}  // namespace detail

/// A constant learning rate.
class ConstantLr {
 public:
  explicit ConstantLr(double lr) : lr_(lr) { detail::check_lr_option(lr, "constant", "learning_rate"); }
  double operator()(std::int64_t step) const {
    detail::check_step(step, "constant");
    return lr_;
  }

 private:
  double lr_;
};

/// tf.train.piecewise_constant over the global step.
class PiecewiseConstant {
 public:
  PiecewiseConstant(std::vector<std::int64_t> boundaries, std::vector<double> values)
      : b_(std::move(boundaries)), v_(std::move(values)) {
    if (v_.size() != b_.size() + 1)
      throw ConfigError("piecewise_constant: option 'values' must have one more element than 'boundaries' (" +
                        std::to_string(b_.size()) + " boundaries, " + std::to_string(v_.size()) + " values)");
    for (std::size_t i = 1; i < b_.size(); ++i)
      if (b_[i] <= b_[i - 1])
        throw ConfigError(
            "piecewise_constant: option 'boundaries' must be strictly increasing, but boundaries[" +
            std::to_string(i) + "] = " + std::to_string(b_[i]) + " <= boundaries[" + std::to_string(i - 1) +
            "] = " + std::to_string(b_[i - 1]));
    for (std::size_t i = 0; i < v_.size(); ++i)
      detail::check_lr_option(v_[i], "piecewise_constant", ("values[" + std::to_string(i) + "]").c_str());
  }
  double operator()(std::int64_t step) const {
    detail::check_step(step, "piecewise_constant");
    std::size_t i = 0;
    while (i < b_.size() && step > b_[i]) ++i;
    return v_[i];
  }
  const std::vector<std::int64_t>& boundaries() const { return b_; }
  const std::vector<double>& values() const { return v_; }

 private:
  std::vector<std::int64_t> b_;
  std::vector<double> v_;
};

/// tf.train.exponential_decay.
class ExponentialDecay {
 public:
  ExponentialDecay(double lr, std::int64_t decay_steps, double decay_rate, bool staircase = false)
      : lr_(lr), steps_(decay_steps), rate_(decay_rate), staircase_(staircase) {
    detail::check_lr_option(lr, "exponential_decay", "learning_rate");
    detail::require(decay_steps > 0, "exponential_decay", "decay_steps", "must be > 0", double(decay_steps));
    detail::require(std::isfinite(decay_rate) && decay_rate > 0, "exponential_decay", "decay_rate",
                    "must be finite and > 0", decay_rate);
  }
  double operator()(std::int64_t step) const {
    detail::check_step(step, "exponential_decay");
    double p = double(step) / double(steps_);
    if (staircase_) p = std::floor(p);
    return lr_ * std::pow(rate_, p);
  }

 private:
  double lr_;
  std::int64_t steps_;
  double rate_;
  bool staircase_;
};

/// tf.train.cosine_decay (alpha: the final fraction of lr).
class CosineDecay {
 public:
  CosineDecay(double lr, std::int64_t decay_steps, double alpha = 0.0)
      : lr_(lr), steps_(decay_steps), alpha_(alpha) {
    detail::check_lr_option(lr, "cosine_decay", "learning_rate");
    detail::require(decay_steps > 0, "cosine_decay", "decay_steps", "must be > 0", double(decay_steps));
    detail::require(alpha >= 0 && alpha <= 1, "cosine_decay", "alpha", "must be in [0, 1]", alpha);
  }
  double operator()(std::int64_t step) const {
    detail::check_step(step, "cosine_decay");
    const double pi = 3.14159265358979323846;
    const double frac = double(std::min(step, steps_)) / double(steps_);
    const double cosine = 0.5 * (1.0 + std::cos(pi * frac));
    return lr_ * ((1.0 - alpha_) * cosine + alpha_);
  }

 private:
  double lr_;
  std::int64_t steps_;
  double alpha_;
};

/// tf.train.polynomial_decay (cycle = false): from lr to end_lr over
/// decay_steps, then end_lr.
class PolynomialDecay {
 public:
  PolynomialDecay(double lr, std::int64_t decay_steps, double end_lr = 0.0, double power = 1.0)
      : lr_(lr), steps_(decay_steps), end_(end_lr), power_(power) {
    detail::check_lr_option(lr, "polynomial_decay", "learning_rate");
    detail::check_lr_option(end_lr, "polynomial_decay", "end_learning_rate");
    detail::require(decay_steps > 0, "polynomial_decay", "decay_steps", "must be > 0", double(decay_steps));
    detail::require(std::isfinite(power) && power > 0, "polynomial_decay", "power", "must be finite and > 0",
                    power);
  }
  double operator()(std::int64_t step) const {
    detail::check_step(step, "polynomial_decay");
    const double frac = double(std::min(step, steps_)) / double(steps_);
    return (lr_ - end_) * std::pow(1.0 - frac, power_) + end_;
  }

 private:
  double lr_;
  std::int64_t steps_;
  double end_, power_;
};

/// Linear warm-up from init_lr to inner(warmup_steps), then inner(step).
template <class Inner>
class LinearWarmup {
 public:
  LinearWarmup(Inner inner, std::int64_t warmup_steps, double init_lr = 0.0)
      : inner_(std::move(inner)), steps_(warmup_steps), init_(init_lr) {
    detail::require(warmup_steps > 0, "linear_warmup", "warmup_steps", "must be > 0", double(warmup_steps));
    detail::check_lr_option(init_lr, "linear_warmup", "init_lr");
  }
  double operator()(std::int64_t step) const {
    detail::check_step(step, "linear_warmup");
    if (step >= steps_) return inner_(step);
    const double target = inner_(steps_);
    return init_ + double(step) / double(steps_) * (target - init_);
  }

 private:
  Inner inner_;
  std::int64_t steps_;
  double init_;
};

/// Any schedule (or a constant), type-erased.
class Schedule {
 public:
  /// A constant learning rate.
  Schedule(double lr) : f_(ConstantLr(lr)) {}  // NOLINT(implicit)
  template <class S, class = std::enable_if_t<std::is_invocable_r_v<double, const S&, std::int64_t> &&
                                              !std::is_same_v<std::decay_t<S>, Schedule>>>
  Schedule(S s) : f_(std::move(s)) {}  // NOLINT(implicit)
  double operator()(std::int64_t step) const { return f_(step); }
  double lr(std::int64_t step) const { return f_(step); }

 private:
  std::function<double(std::int64_t)> f_;
};

/// TF names.
inline PiecewiseConstant piecewise_constant(std::vector<std::int64_t> boundaries,
                                            std::vector<double> values) {
  return PiecewiseConstant(std::move(boundaries), std::move(values));
}
inline ExponentialDecay exponential_decay(double lr, std::int64_t decay_steps, double decay_rate,
                                          bool staircase = false) {
  return ExponentialDecay(lr, decay_steps, decay_rate, staircase);
}
inline CosineDecay cosine_decay(double lr, std::int64_t decay_steps, double alpha = 0.0) {
  return CosineDecay(lr, decay_steps, alpha);
}
inline PolynomialDecay polynomial_decay(double lr, std::int64_t decay_steps, double end_lr = 0.0,
                                        double power = 1.0) {
  return PolynomialDecay(lr, decay_steps, end_lr, power);
}
template <class Inner>
LinearWarmup<Inner> linear_warmup(Inner inner, std::int64_t warmup_steps, double init_lr = 0.0) {
  return LinearWarmup<Inner>(std::move(inner), warmup_steps, init_lr);
}

/// What make_schedule() needs to know of the run it schedules.
struct ScheduleSpec {
  double learning_rate = 0.1;    ///< the initial learning rate
  std::int64_t train_steps = 0;  ///< the run's length in steps
  double steps_per_epoch = 0;    ///< training examples / batch size
  /// "seed" only: place the boundaries at the same fractions of this run as
  /// in the estimator's 80,000-step run (a run sized in epochs) instead of
  /// at fixed epochs.
  bool scale_to_run = false;
};

/// A schedule chosen by name, and one line saying what it does.
struct NamedSchedule {
  Schedule schedule = 0.0;
  std::string description;
};

/// The learning-rate schedule called `name` (a program's --schedule):
///  - "seed": the ResNet estimator's piecewise constant lr, lr/10, lr/100,
///    lr/500 with boundaries at epochs 82, 123 and 300 (or, scale_to_run, at
///    those fractions of its 80,000-step run of 351-step epochs);
///  - "step": lr x0.1 at 50 % and x0.01 at 75 % of the run;
///  - "cosine": cosine decay from lr to 0 over the run.
/// Another name is a ConfigError listing these.
inline NamedSchedule make_schedule(const std::string& name, const ScheduleSpec& spec) {
  const double lr = spec.learning_rate;
  const std::int64_t n = spec.train_steps;
  NamedSchedule r;
  if (name == "seed") {
    std::vector<std::int64_t> b;
    for (double e : {82.0, 123.0, 300.0})
      b.push_back(spec.scale_to_run ? std::int64_t(double(n) * e * 351.0 / 80000.0)
                                    : std::int64_t(spec.steps_per_epoch * e));
    r.description = "piecewise constant, boundaries " + std::to_string(b[0]) + "/" + std::to_string(b[1]) +
                    "/" + std::to_string(b[2]) + " steps";
    r.schedule = piecewise_constant(std::move(b), {lr, lr * 0.1, lr * 0.01, lr * 0.002});
  } else if (name == "step") {
    r.schedule = piecewise_constant({n / 2, n * 3 / 4}, {lr, lr * 0.1, lr * 0.01});
    r.description = "x0.1 at 50% and 75% of the run";
  } else if (name == "cosine") {
    r.schedule = cosine_decay(lr, std::max<std::int64_t>(1, n));
    r.description = "cosine decay to 0";
  } else {
    throw ConfigError("learning-rate schedule '" + name + "': expected seed, step or cosine");
  }
  return r;
}

}  // namespace cifarnet::optim
