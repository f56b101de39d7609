// Everything of the program but the network (network.cpp): synthetic
// CIFAR-shaped data, momentum SGD, a few steps, an evaluation.
#include <cstdint>
#include <iostream>
#include <memory>

#include <cifarnet/cifarnet.hpp>
#include <cifarnet/data/recipes.hpp>
#include <cifarnet/demo/synthetic_cifar.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/recipes/session.hpp>
#include <cifarnet/train/trainer.hpp>

using namespace cifarnet;

std::unique_ptr<recipes::Session> make_session(std::int64_t steps);

int main() {
  const std::int64_t steps = 20;
  const std::unique_ptr<recipes::Session> net = make_session(steps);
  train::TrainerBase& trainer = net->trainer();
  optim::Momentum opt(trainer.parameters(), optim::MomentumOptions().momentum(0.9));
  trainer.set_optimizer(opt, optim::ConstantLr(0.05));
  data::PipelineOptions po = data::recipes::resnet_train_options(/*seed=*/11, 32);
  po.num_workers = 1;
  data::Pipeline<data::ImageSetSource> pipe(data::ImageSetSource(data::synthetic_cifar(640, 3)), po);
  trainer.run(pipe);
  data::Pipeline<data::ImageSetSource> eval_pipe(data::ImageSetSource(data::synthetic_cifar(200, 4)),
                                                 data::recipes::resnet_eval_options(100));
  const auto r = net->evaluate(eval_pipe);
  std::cout << "[synthetic data] step " << trainer.global_step() << ": precision@1 " << r.precision() << "\n";
  return trainer.global_step() == steps ? 0 : 1;
}
