// The airbench94 network on oneDNN, compiled once (speedrun.hpp), and its
// step plans (--explain-plan).
#include "../common/explain_plan.hpp"
#include "speedrun.hpp"

template class cifarnet::Model<cifarnet::Airbench94, cifarnet::backend::OneDnn>;

namespace speedrun {

std::string explain_onednn(const cifarnet::recipes::AirbenchOptions& opts, std::size_t eval_batch) {
  using namespace cifarnet;
  // As recipes::train_airbench builds it.
  NetOptions nopts = airbench_options();
  nopts.with_conv_precision(opts.conv_precision);
  Model<Airbench94, backend::OneDnn> net({3, 32, 32}, opts.format, nopts, opts.seed);
  return examples::explain_step_plans(net, opts.batch_size, eval_batch);
}

}  // namespace speedrun
