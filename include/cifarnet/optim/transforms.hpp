// cifarnet/optim/transforms.hpp — gradient transforms (TF-Slim's
// create_train_op options) as Chain stages and as free functions.
//
// A transform rewrites the gradients of the selected trainable parameters in
// place and leaves values alone; Chain runs transforms in order, then the
// optimizer. Semantics (TensorFlow's):
//  - ClipByNorm (TF-Slim clip_gradient_norm): each tensor g becomes
//    g * clip / max(||g||, clip) — applied even when ||g|| < clip, as TF.
//  - ClipByGlobalNorm: every g becomes g * scale with
//    scale = clip * min(1 / global_norm, 1 / clip); a NaN or Inf global norm
//    makes every gradient NaN (TF), which CheckNumerics or the optimizer's
//    caller then sees. Returns the global norm for logging.
//  - GradientMultipliers: g *= multiplier for parameters whose name matches a
//    pattern (first matching pattern wins).
//  - CheckNumerics: NumericsError naming the first parameter whose gradient
//    holds NaN or Inf; check_numerics(loss) does the same for the loss.
// Sums of squares are accumulated in double, in a fixed order. Every pass
// runs on the arena's backend kernels (ops::Arena).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/optim/layout.hpp"
#include "cifarnet/optim/select.hpp"
#include "cifarnet/optim/state.hpp"

namespace cifarnet::optim {

namespace detail {
/// "NaN" / "+Inf" / "-Inf" for a non-finite value.
inline std::string non_finite_name(double v) { return std::isnan(v) ? "NaN" : (v > 0 ? "+Inf" : "-Inf"); }

/// Throws NumericsError naming the first entry whose gradient is not finite.
template <class T>
void check_gradients(ArenaKernels<T>& k, const Layout& layout, const T* g) {
  if (k.all_finite(layout.runs(), g)) return;
  for (std::size_t i = 0; i < layout.entries().size(); ++i) {
    const auto& en = layout.entries()[i];
    const NonFinite bad = k.find_non_finite(layout.entry_runs(i), g);
    if (bad.found)
      throw NumericsError("check_numerics: gradient of '" + en.name + "' is " + non_finite_name(bad.value) +
                          " at element " + std::to_string(bad.index - en.offset) + " of " +
                          std::to_string(en.size));
  }
  throw NumericsError("check_numerics: a gradient holds NaN or Inf outside every parameter (arena padding)");
}

/// Options holding one clip norm (> 0); `Derived::kWho` names them in errors.
template <class Derived>
class ClipOptions {
 public:
  explicit ClipOptions(double clip_norm) : clip_(clip_norm) {}
  Derived& clip_norm(double c) {
    clip_ = c;
    return static_cast<Derived&>(*this);
  }
  double clip_norm() const { return clip_; }
  void validate() const {
    require(std::isfinite(clip_) && clip_ > 0, Derived::kWho, "clip_norm", "must be finite and > 0", clip_);
  }

 private:
  double clip_;
};

/// What every transform stage shares: options validated at construction, the
/// layout of the selected parameters, and no state.
template <class T, class Opts>
class TransformBase {
 public:
  using Scalar = T;
  using Options = Opts;
  static constexpr bool is_optimizer = false;

  /// Stateless: f is never called.
  template <class F>
  void visit_state(F&&) {}
  const Options& options() const { return opts_; }

 protected:
  TransformBase(const Parameters<T>& params, Options opts, const Selection& train) : opts_(std::move(opts)) {
    opts_.validate();
    layout_ = Layout::trainable(params, train);
  }

  Options opts_;
  Layout layout_;
};
}  // namespace detail

/// check_numerics on a scalar such as the loss: NumericsError "<what> is NaN"
/// (TF: "LossTensor is inf or nan").
inline void check_numerics(double value, const std::string& what = "loss") {
  if (!std::isfinite(value))
    throw NumericsError("check_numerics: " + what + " is " + detail::non_finite_name(value) +
                        " (LossTensor is inf or nan)");
}

// ---------------------------------------------------------------- ClipByNorm

/// Options of ClipByNorm: the per-tensor L2 norm limit (> 0).
class ClipByNormOptions : public detail::ClipOptions<ClipByNormOptions> {
 public:
  using ClipOptions::ClipOptions;
  static constexpr const char* kWho = "ClipByNormOptions";
};

/// Clips each gradient tensor to L2 norm clip_norm (TF-Slim clip_gradient_norm).
template <class T = float>
class ClipByNorm : public detail::TransformBase<T, ClipByNormOptions> {
  using Base = detail::TransformBase<T, ClipByNormOptions>;
  using Base::layout_;
  using Base::opts_;

 public:
  explicit ClipByNorm(const Parameters<T>& params, ClipByNormOptions opts, const Selection& train = {})
      : Base(params, std::move(opts), train) {}

  void apply(Parameters<T>& params) {
    layout_.check(params, "ClipByNorm");
    auto& k = detail::kernels(params);
    T* g = params.grads().data();
    const T clip = T(opts_.clip_norm());
    for (std::size_t i = 0; i < layout_.entries().size(); ++i) {
      const ArenaRuns& runs = layout_.entry_runs(i);
      // TF clip_by_norm: l2sum > 0 ? sqrt(l2sum) : l2sum, then t * clip / max(l2norm, clip).
      const T l2sum = T(k.sum_squares(runs, g));
      const T l2norm = l2sum > T(0) ? std::sqrt(l2sum) : l2sum;
      const T denom = std::isnan(l2norm) ? l2norm : std::max(l2norm, clip);
      k.scale_div(runs, g, clip, denom);
    }
  }
};

/// Free function: clips each trainable gradient tensor to `clip_norm`.
template <class T>
void clip_by_norm(Parameters<T>& params, double clip_norm) {
  ClipByNorm<T>(params, ClipByNormOptions(clip_norm)).apply(params);
}

// ---------------------------------------------------------- ClipByGlobalNorm

/// Options of ClipByGlobalNorm: the global L2 norm limit (> 0).
class ClipByGlobalNormOptions : public detail::ClipOptions<ClipByGlobalNormOptions> {
 public:
  using ClipOptions::ClipOptions;
  static constexpr const char* kWho = "ClipByGlobalNormOptions";
};

/// Scales all selected gradients by clip / max(global_norm, clip)
/// (tf.clip_by_global_norm); remembers the norm it saw.
template <class T = float>
class ClipByGlobalNorm : public detail::TransformBase<T, ClipByGlobalNormOptions> {
  using Base = detail::TransformBase<T, ClipByGlobalNormOptions>;
  using Base::layout_;
  using Base::opts_;

 public:
  explicit ClipByGlobalNorm(const Parameters<T>& params, ClipByGlobalNormOptions opts,
                            const Selection& train = {})
      : Base(params, std::move(opts), train) {}

  /// Clips in place and returns the global norm before clipping.
  double apply(Parameters<T>& params) {
    layout_.check(params, "ClipByGlobalNorm");
    auto& k = detail::kernels(params);
    T* g = params.grads().data();
    const double norm = std::sqrt(k.sum_squares(layout_.runs(), g));
    last_norm_ = norm;
    const T clip = T(opts_.clip_norm());
    const T use_norm = T(norm);
    // TF: scale = clip * min(1 / use_norm, 1 / clip) + (use_norm - use_norm).
    const T scale = clip * std::min(T(1) / use_norm, T(1) / clip) + (use_norm - use_norm);
    if (std::isfinite(scale)) {
      k.scale(layout_.runs(), g, scale);
    } else {  // every gradient becomes NaN, the arena padding stays zero
      const T nan = std::numeric_limits<T>::quiet_NaN();
      for (std::size_t i = 0; i < layout_.entries().size(); ++i) k.fill(layout_.entry_runs(i), g, nan);
    }
    return norm;
  }

  /// The global norm seen by the last apply() (for logging); NaN before.
  double last_norm() const { return last_norm_; }

 private:
  double last_norm_ = std::numeric_limits<double>::quiet_NaN();
};

/// The L2 norm of all trainable gradients together (tf.global_norm).
template <class T>
double global_norm(const Parameters<T>& params) {
  const std::size_t n = std::size_t(params.grads().size());
  return std::sqrt(detail::kernels(params).sum_squares(ArenaRuns::span(0, n), params.grads().data()));
}

/// Free function (as torch::nn::utils::clip_grad_norm_): clips all trainable
/// gradients by global norm and returns the norm before clipping.
template <class T>
double clip_by_global_norm(Parameters<T>& params, double clip_norm) {
  return ClipByGlobalNorm<T>(params, ClipByGlobalNormOptions(clip_norm)).apply(params);
}

// ------------------------------------------------------- GradientMultipliers

/// Options of GradientMultipliers: (pattern, multiplier) rules, e.g.
/// `GradientMultipliersOptions({{"conv0/weights", 1.2}, {"fc8/*", 3.4}})`.
class GradientMultipliersOptions {
 public:
  GradientMultipliersOptions() = default;
  GradientMultipliersOptions(std::vector<std::pair<Pattern, double>> rules)
      : rules_(std::move(rules)) {}  // NOLINT
  GradientMultipliersOptions& set(Pattern p, double multiplier) {
    rules_.emplace_back(std::move(p), multiplier);
    return *this;
  }
  const std::vector<std::pair<Pattern, double>>& rules() const { return rules_; }
  void validate() const {
    if (rules_.empty())
      throw ConfigError("GradientMultipliersOptions: option 'gradient_multipliers' is empty");
    for (const auto& [p, m] : rules_)
      detail::require(std::isfinite(m), "GradientMultipliersOptions",
                      "gradient_multipliers['" + p.str() + "']", "must be finite", m);
  }

 private:
  std::vector<std::pair<Pattern, double>> rules_;
};

/// Scales the gradients of matching parameters (TF-Slim gradient_multipliers).
template <class T = float>
class GradientMultipliers : public detail::TransformBase<T, GradientMultipliersOptions> {
  using Base = detail::TransformBase<T, GradientMultipliersOptions>;
  using Base::layout_;
  using Base::opts_;

 public:
  /// Every rule must match at least one trainable parameter (ConfigError
  /// otherwise); only selected parameters are scaled.
  explicit GradientMultipliers(const Parameters<T>& params, GradientMultipliersOptions opts,
                               const Selection& train = {})
      : Base(params, std::move(opts), train) {
    for (const auto& [p, m] : opts_.rules()) {
      if (!matches_trainable(p, params))
        throw ConfigError("GradientMultipliersOptions: pattern '" + p.str() +
                          "' matches no trainable parameter");
    }
    for (std::size_t k = 0; k < layout_.entries().size(); ++k) {
      const auto& en = layout_.entries()[k];
      for (const auto& [p, m] : opts_.rules())
        if (p.matches(en.name)) {
          scaled_.emplace_back(k, m);
          break;
        }
    }
  }

  void apply(Parameters<T>& params) {
    layout_.check(params, "GradientMultipliers");
    auto& kern = detail::kernels(params);
    T* g = params.grads().data();
    for (const auto& [k, mult] : scaled_) kern.scale(layout_.entry_runs(k), g, T(mult));
  }

  /// The multiplier applied to a parameter's gradient (1 when none).
  double multiplier(const std::string& param) const {
    for (const auto& [k, m] : scaled_)
      if (layout_.entries()[k].name == param) return m;
    return 1.0;
  }

 private:
  std::vector<std::pair<std::size_t, double>> scaled_;  // entry index, multiplier
};

/// Free function: scales matching trainable gradients.
template <class T>
void multiply_gradients(Parameters<T>& params, GradientMultipliersOptions rules) {
  GradientMultipliers<T>(params, std::move(rules)).apply(params);
}

// -------------------------------------------------------------- CheckNumerics

/// Options of CheckNumerics (none yet).
class CheckNumericsOptions {
 public:
  void validate() const {}
};

/// Throws NumericsError naming the first parameter with a NaN/Inf gradient.
template <class T = float>
class CheckNumerics : public detail::TransformBase<T, CheckNumericsOptions> {
  using Base = detail::TransformBase<T, CheckNumericsOptions>;
  using Base::layout_;

 public:
  explicit CheckNumerics(const Parameters<T>& params, CheckNumericsOptions opts = {},
                         const Selection& train = {})
      : Base(params, opts, train) {}

  void apply(Parameters<T>& params) {
    layout_.check(params, "CheckNumerics");
    detail::check_gradients(detail::kernels(params), layout_, params.grads().data());
  }
};

/// Free function: NumericsError naming the first trainable parameter whose
/// gradient holds NaN or Inf.
template <class T>
void check_numerics(const Parameters<T>& params) {
  detail::check_gradients(detail::kernels(params), detail::Layout::trainable(params, Selection::all()),
                          params.grads().data());
}

}  // namespace cifarnet::optim
