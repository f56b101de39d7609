// cifarnet/optim/weight_decay.hpp — L2 weight decay as an optimizer stage
// (TF's `wd * tf.nn.l2_loss(v)` added to the total loss).
//
//   using Recipe = optim::Chain<optim::WeightDecay, optim::Momentum>;
//   Recipe opt(params, optim::WeightDecayOptions(2e-4), optim::MomentumOptions().momentum(0.9));
//   const double reg = opt.regularize(params);   // wd · Σ v²/2; g += wd · v
//   opt.update(params, lr);                      // the other stages, then momentum
//
// WeightDecay is a regularizer: a Chain runs it first, in regularize(), and
// the Trainer reports what it returns as StepResult::regularization (TF adds
// the term to the loss, so its gradient is part of what every transform,
// clipping included, sees). For each decayed parameter:
//  - the gradient gets wd · v, rounded, then added (never one fused
//    multiply-add, as TF computes `grad + wd * var`);
//  - the loss term is wd · Σ v²/2, the squares summed in double parameter by
//    parameter in registration order, rounded to T (float32 l2_loss).
// The decayed parameters are the trained ones (the Chain's Selection), or
// those of them matching WeightDecayOptions::decay (the TF CIFAR-10 tutorial
// decays only local3/weights and local4/weights); a decay pattern matching
// no trained parameter is a ConfigError naming it. wd = 0 does nothing.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/core/pending.hpp"
#include "cifarnet/optim/select.hpp"
#include "cifarnet/optim/state.hpp"
#include "cifarnet/optim/transforms.hpp"

namespace cifarnet::optim {

/// Options of WeightDecay: `WeightDecayOptions(2e-4)`, or for the tutorial
/// CNN `WeightDecayOptions(0.004).decay(Selection({"local3/weights", "local4/weights"}))`.
class WeightDecayOptions {
 public:
  /// The coefficient wd (finite, >= 0) of wd · Σ v²/2.
  explicit WeightDecayOptions(double weight_decay) : wd_(weight_decay) {}
  WeightDecayOptions& weight_decay(double wd) {
    wd_ = wd;
    return *this;
  }
  /// Decays only the trained parameters `which` selects (default: all of them).
  WeightDecayOptions& decay(Selection which) {
    decay_ = std::move(which);
    return *this;
  }
  double weight_decay() const { return wd_; }
  const Selection& decayed() const { return decay_; }

  void validate() const {
    detail::require(std::isfinite(wd_) && wd_ >= 0, "WeightDecayOptions", "weight_decay",
                    "must be finite and >= 0", wd_);
  }

 private:
  double wd_;
  Selection decay_;
};

/// Adds wd · v to the gradients of the decayed parameters and reports
/// wd · Σ v²/2 (a Chain regularizer).
template <class T = float>
class WeightDecay : public detail::TransformBase<T, WeightDecayOptions> {
  using Base = detail::TransformBase<T, WeightDecayOptions>;
  using Base::layout_;
  using Base::opts_;

 public:
  /// Runs in a Chain's regularize(), before every other stage.
  static constexpr bool is_regularizer = true;

  /// Decays the parameters of `train` that opts.decayed() selects; a decay
  /// pattern matching none of them is a ConfigError naming the pattern.
  explicit WeightDecay(const Parameters<T>& params, WeightDecayOptions opts, const Selection& train = {})
      : Base(params, std::move(opts), train) {
    const Selection& d = opts_.decayed();
    for (const auto& p : d.patterns()) {
      bool any = false;
      for (const auto& en : layout_.entries()) any = any || p.matches(en.name);
      if (!any)
        throw ConfigError("WeightDecayOptions: decay pattern '" + p.str() + "' matches no trained parameter");
    }
    for (std::size_t k = 0; k < layout_.entries().size(); ++k)
      if (d.matches(layout_.entries()[k].name)) decayed_.push_back(k);
  }

  /// Adds wd · v to the decayed gradients; returns wd · Σ v²/2 (also kept
  /// in loss()). wd = 0 touches nothing and returns 0.
  double apply(Parameters<T>& params) { return apply_deferred(params).get(); }

  /// apply(), its term as a Pending (core/pending.hpp): on a device the sum
  /// stays there until read, with the step's other values. loss() reads it.
  Pending apply_deferred(Parameters<T>& params) {
    layout_.check(params, "WeightDecay");
    const double wd = opts_.weight_decay();
    if (wd == 0) return last_ = Pending::ready(0.0);
    auto& kern = detail::kernels(params);
    if (ranges_.size() != decayed_.size()) {  // built once
      ranges_.clear();
      for (std::size_t k : decayed_) {
        const auto& en = layout_.entries()[k];
        ranges_.emplace_back(en.offset, en.offset + en.size);
      }
    }
    PendingArgs args;
    args.a = wd;
    last_ = kern.weight_decay_ranges_deferred(ranges_, params.grads().data(), params.values().data(), T(wd),
                                              &term, args);
    return last_;
  }

  /// wd · Σ v²/2 of the last apply() (0 before).
  double loss() const { return last_.get(); }
  /// Whether `param` is decayed.
  bool decays(const std::string& param) const {
    for (std::size_t k : decayed_)
      if (layout_.entries()[k].name == param) return true;
    return false;
  }
  /// The decayed parameters' names, in registration order.
  std::vector<std::string> decayed() const {
    std::vector<std::string> names;
    for (std::size_t k : decayed_) names.push_back(layout_.entries()[k].name);
    return names;
  }

 private:
  std::vector<std::size_t> decayed_;                         // entry indices
  std::vector<std::pair<std::size_t, std::size_t>> ranges_;  // their arena ranges (apply builds it)
  Pending last_;                                             // the last apply()'s term

  // TF's l2_loss term from Σ v²: wd · (Σ v²)/2 in double, rounded to T. Σ (Σv²)/2
  // is (Σ Σv²)/2 to the bit: halving is exact.
  static double term(double sum, const unsigned char*, const PendingArgs& a) {
    return double(T(a.a * (sum / 2)));
  }
};

/// Free function: decays every trainable parameter once (adds wd · v to its
/// gradient) and returns wd · Σ v²/2.
template <class T>
double weight_decay(Parameters<T>& params, double wd) {
  return WeightDecay<T>(params, WeightDecayOptions(wd)).apply(params);
}

}  // namespace cifarnet::optim
