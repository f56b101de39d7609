// examples/cifar10_speedrun/speedrun.hpp — the recipe on the oneDNN backend,
// compiled in its own files (network.cpp: the network; train.cpp: the
// recipe's loop) so that main.cpp (flags and printing) compiles at -Og and
// the three build in parallel.
#pragma once

#include <functional>

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

}  // namespace speedrun
