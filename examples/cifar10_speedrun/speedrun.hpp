// examples/cifar10_speedrun/speedrun.hpp — the recipe on the oneDNN backend,
// compiled in its own files (network.cpp: the network; train.cpp: the
// recipe's loop) so that main.cpp (flags and printing) compiles at -Og and
// the three build in parallel. network.cpp also explains the network's step
// plans (--explain-plan).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/models/airbench.hpp>
#include <cifarnet/nn/model.hpp>
#include <cifarnet/recipes/airbench.hpp>

extern template class cifarnet::Model<cifarnet::Airbench94, cifarnet::backend::OneDnn>;

namespace speedrun {

/// recipes::train_airbench<backend::OneDnn> (train.cpp).
cifarnet::recipes::AirbenchResult train_onednn(
    const cifarnet::data::InMemoryDataset& train, const cifarnet::data::InMemoryDataset& test,
    const cifarnet::recipes::AirbenchOptions& opts,
    const std::function<void(const cifarnet::recipes::AirbenchEpoch&)>& on_epoch,
    const std::function<void(const cifarnet::recipes::AirbenchProgress&)>& on_step);

/// The batch of recipes::train_airbench's evaluations (airbench_accuracy's;
/// a test set smaller than it is one batch).
inline constexpr std::size_t kEvalBatch = 2000;

/// --explain-plan: the step plans (examples/common/explain_plan.hpp) of the
/// network train_airbench builds with `opts`, a training step of
/// opts.batch_size images and an evaluation forward of `eval_batch`
/// (network.cpp).
std::string explain_onednn(const cifarnet::recipes::AirbenchOptions& opts, std::size_t eval_batch);

}  // namespace speedrun
