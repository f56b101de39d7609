// The airbench94 recipe's loop on oneDNN (speedrun.hpp).
#include "speedrun.hpp"

namespace speedrun {

cifarnet::recipes::AirbenchResult train_onednn(
    const cifarnet::data::InMemoryDataset& train, const cifarnet::data::InMemoryDataset& test,
    const cifarnet::recipes::AirbenchOptions& opts,
    const std::function<void(const cifarnet::recipes::AirbenchEpoch&)>& on_epoch,
    const std::function<void(const cifarnet::recipes::AirbenchProgress&)>& on_step) {
  return cifarnet::recipes::train_airbench<cifarnet::backend::OneDnn>(train, test, opts, on_epoch, on_step);
}

}  // namespace speedrun
