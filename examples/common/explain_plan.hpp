// examples/common/explain_plan.hpp — the examples' --explain-plan: the step
// plans of the model a program trains (Model::explain_plan, nn/plan.hpp):
// its training step, then its inference forward, each with its nodes,
// tensors and shapes, where each fusion rule fired and why it did not
// elsewhere. The program builds the model as it would to train, prints
// them and exits, reading no data and training nothing.
#pragma once

#include <cstddef>
#include <string>

#include <cifarnet/nn/context.hpp>

namespace examples {

/// --explain-plan's help text (`infer` names the inference forward the
/// program runs, e.g. "the evaluation's forward").
inline std::string explain_plan_help(const std::string& infer) {
  return "Print the training step's plan: its nodes, which fusion rules fired where and why the others did "
         "not; then the same for " +
         infer + "; then exit (no data read, nothing trained or written).";
}

/// The training step's plan at batch `train_batch`, then the inference
/// forward's at `infer_batch`, of `net` (a cifarnet::Model).
template <class M>
std::string explain_step_plans(M& net, std::size_t train_batch, std::size_t infer_batch) {
  return net.explain_plan(cifarnet::Mode::Train, train_batch) + "\n" +
         net.explain_plan(cifarnet::Mode::Infer, infer_batch);
}

}  // namespace examples
