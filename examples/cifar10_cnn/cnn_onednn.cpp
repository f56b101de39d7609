// examples/cifar10_cnn/cnn_onednn.cpp — the tutorial CNN on oneDNN, one
// model or towers: its forward and backward compile here, once for the
// three programs (an object library), apart from their flags and loops;
// and its step plans (cifar10_train --explain_plan).
#include <memory>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/distributed/towers.hpp>
#include <cifarnet/models/cifar10_cnn.hpp>

#include "../common/explain_plan.hpp"
#include "network.hpp"

namespace cifar10 {

std::unique_ptr<recipes::Session> make_cpu_session(std::size_t towers, const NetOptions& options,
                                                   std::uint64_t seed, const train::TrainerOptions& o) {
  using Net = Model<Cifar10Cnn, backend::OneDnn>;
  if (towers == 0) return recipes::make_session(std::make_unique<Net>(kInput, kFormat, options, seed), o);
  return recipes::make_session(
      std::make_unique<distributed::Towers<Net>>(towers, kInput, kFormat, options, seed), o);
}

std::string explain_cpu_plan(const NetOptions& options, std::uint64_t seed, std::size_t train_batch,
                             std::size_t infer_batch) {
  Model<Cifar10Cnn, backend::OneDnn> net(kInput, kFormat, options, seed);
  return examples::explain_step_plans(net, train_batch, infer_batch);
}

}  // namespace cifar10
