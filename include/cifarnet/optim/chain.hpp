// cifarnet/optim/chain.hpp — a training recipe as one type: gradient
// transforms in order, then an optimizer.
//
//   using Recipe = optim::Chain<optim::CheckNumerics, optim::ClipByGlobalNorm, optim::Momentum>;
//   Recipe opt(params, {}, optim::ClipByGlobalNormOptions(5.0), optim::MomentumOptions().momentum(0.9));
//   opt.step(params, schedule(global_step));
//
// Chain<Stages...> works on float parameters; BasicChain<T, Stages...> on any
// scalar type. Every stage is built over the same Selection
// (variables_to_train), so transforms see only the gradients of the
// parameters being trained, as in TF-Slim. The last stage must be an
// optimizer and only the last. Regularizers (WeightDecay: stages with
// `is_regularizer`, whose apply() adds their term's gradient and returns the
// term) come first, before every other transform, since TF adds their term to
// the loss before any gradient is transformed.
//   regularize(params)  runs the regularizers, returns the sum of their terms;
//   update(params, lr)  checks lr, runs the other transforms, then the optimizer;
//   step(params, lr)    checks lr, then regularize and update.
// The Trainer calls regularize() and update() apart, to report the terms and
// check the total loss and the gradients in between. visit_state visits every
// stage's state, in order.
#pragma once

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cifarnet/core/params.hpp"
#include "cifarnet/core/pending.hpp"
#include "cifarnet/optim/select.hpp"
#include "cifarnet/optim/state.hpp"

namespace cifarnet::optim {

namespace detail {
/// Whether stage S is a regularizer (declares `is_regularizer = true`).
template <class S, class = void>
struct is_regularizer : std::false_type {};
template <class S>
struct is_regularizer<S, std::enable_if_t<S::is_regularizer>> : std::true_type {};

/// Whether regularizer S can leave its term on the device (apply_deferred).
template <class S, class P, class = void>
struct has_apply_deferred : std::false_type {};
template <class S, class P>
struct has_apply_deferred<S, P, std::void_t<decltype(std::declval<S&>().apply_deferred(std::declval<P&>()))>>
    : std::true_type {};

/// True when no regularizer follows a stage that is not one.
template <bool... Regularizer>
constexpr bool regularizers_first() {
  const bool flags[] = {Regularizer...};
  bool other = false;
  for (bool r : flags) {
    if (r && other) return false;
    other = other || !r;
  }
  return true;
}
}  // namespace detail

/// Transforms then an optimizer, over parameters of type T.
template <class T, template <class> class... Stages>
class BasicChain {
  static_assert(sizeof...(Stages) >= 1, "cifarnet: a Chain needs at least an optimizer as its last stage");
  using Tuple = std::tuple<Stages<T>...>;
  static constexpr std::size_t N = sizeof...(Stages);
  using Last = std::tuple_element_t<N - 1, Tuple>;
  static_assert(Last::is_optimizer,
                "cifarnet: the last stage of a Chain must be an optimizer (GradientDescent, Momentum, Adam)");
  static_assert(
      (int(Stages<T>::is_optimizer) + ...) <= 1,
      "cifarnet: only the last stage of a Chain may be an optimizer; gradient transforms go before it");
  static_assert(detail::regularizers_first<detail::is_regularizer<Stages<T>>::value...>(),
                "cifarnet: regularizers (WeightDecay) go first in a Chain, before the gradient transforms");

 public:
  using Scalar = T;

  /// Builds every stage over all trainable parameters, one options object per stage.
  explicit BasicChain(const Parameters<T>& params, typename Stages<T>::Options... opts)
      : stages_(Stages<T>(params, std::move(opts), Selection::all())...) {}

  /// Builds every stage over the parameters chosen by `train` (variables_to_train).
  BasicChain(const Parameters<T>& params, const Selection& train, typename Stages<T>::Options... opts)
      : stages_(Stages<T>(params, std::move(opts), train)...) {}

  /// Regularizers, transforms in order, then the optimizer with learning rate `lr`.
  void step(Parameters<T>& params, double lr) {
    detail::checked_lr<T>(lr, "Chain");
    regularize(params);
    run_updates(params, lr);
  }

  /// The regularizer stages only: adds their gradients and returns the sum
  /// of their loss terms (0 without regularizers).
  double regularize(Parameters<T>& params) {
    double total = 0;
    std::apply([&](auto&... s) { ((total += regularize_one(s, params)), ...); }, stages_);
    return total;
  }

  /// regularize(), its sum as a Pending (core/pending.hpp): with one
  /// regularizer (weight decay) on a device, the term stays there until
  /// read, with the step's other values; with several, they are added here.
  Pending regularize_deferred(Parameters<T>& params) {
    Pending one;
    std::size_t count = 0;
    double total = 0;
    std::apply(
        [&](auto&... s) {
          (
              [&](auto& st) {
                using S = std::decay_t<decltype(st)>;
                if constexpr (detail::is_regularizer<S>::value) {
                  Pending p;
                  if constexpr (detail::has_apply_deferred<S, Parameters<T>>::value)
                    p = st.apply_deferred(params);
                  else
                    p = Pending::ready(st.apply(params));
                  if (count++ == 0)
                    one = p;
                  else
                    total += p.get();
                }
              }(s),
              ...);
        },
        stages_);
    if (count <= 1) return one;
    return Pending::ready(one.get() + total);
  }

  /// Every stage but the regularizers: checks `lr`, runs the transforms in
  /// order, then the optimizer.
  void update(Parameters<T>& params, double lr) {
    detail::checked_lr<T>(lr, "Chain");
    run_updates(params, lr);
  }

  /// Stage by index.
  template <std::size_t I>
  auto& get() {
    return std::get<I>(stages_);
  }
  /// Stage by template, e.g. chain.get<ClipByGlobalNorm>().last_norm().
  template <template <class> class S>
  S<T>& get() {
    return std::get<S<T>>(stages_);
  }
  /// The optimizer (last stage).
  Last& optimizer() { return std::get<N - 1>(stages_); }

  /// Every stage's state tensors, in stage order.
  template <class F>
  void visit_state(F&& f) {
    std::apply([&](auto&... s) { (s.visit_state(f), ...); }, stages_);
  }

 private:
  void run_updates(Parameters<T>& params, double lr) {
    std::apply([&](auto&... s) { (run(s, params, lr), ...); }, stages_);
  }

  template <class S>
  static void run(S& s, Parameters<T>& params, double lr) {
    if constexpr (S::is_optimizer)
      s.step(params, lr);
    else if constexpr (!detail::is_regularizer<S>::value)
      s.apply(params);
  }

  template <class S>
  static double regularize_one(S& s, Parameters<T>& params) {
    if constexpr (detail::is_regularizer<S>::value)
      return s.apply(params);
    else
      return 0.0;
  }

  Tuple stages_;
};

/// A Chain over float parameters: `Chain<ClipByGlobalNorm, Momentum>`.
template <template <class> class... Stages>
using Chain = BasicChain<float, Stages...>;

}  // namespace cifarnet::optim
