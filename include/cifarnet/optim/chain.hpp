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
// optimizer and only the last. step() checks the learning rate, then runs
// each transform's apply(), then the optimizer's step(). visit_state visits
// every stage's state, in order.
#pragma once

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cifarnet/core/params.hpp"
#include "cifarnet/optim/select.hpp"
#include "cifarnet/optim/state.hpp"

namespace cifarnet::optim {

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

 public:
  using Scalar = T;

  /// Builds every stage over all trainable parameters, one options object per stage.
  explicit BasicChain(const Parameters<T>& params, typename Stages<T>::Options... opts)
      : stages_(Stages<T>(params, std::move(opts), Selection::all())...) {}

  /// Builds every stage over the parameters chosen by `train` (variables_to_train).
  BasicChain(const Parameters<T>& params, const Selection& train, typename Stages<T>::Options... opts)
      : stages_(Stages<T>(params, std::move(opts), train)...) {}

  /// Transforms in order, then the optimizer with learning rate `lr`.
  void step(Parameters<T>& params, double lr) {
    detail::checked_lr<T>(lr, "Chain");
    std::apply([&](auto&... s) { (run(s, params, lr), ...); }, stages_);
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
  template <class S>
  static void run(S& s, Parameters<T>& params, double lr) {
    if constexpr (S::is_optimizer)
      s.step(params, lr);
    else
      s.apply(params);
  }

  Tuple stages_;
};

/// A Chain over float parameters: `Chain<ClipByGlobalNorm, Momentum>`.
template <template <class> class... Stages>
using Chain = BasicChain<float, Stages...>;

}  // namespace cifarnet::optim
