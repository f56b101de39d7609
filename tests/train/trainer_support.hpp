// What the trainer tests share (test_trainer.cpp, test_trainer_hooks.cpp): a
// small ResNet-style network on the reference backend, its optimizer chain,
// a data source whose RNG is checkpointed, and one complete run.
#pragma once

#include <catch2/catch.hpp>

#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/train/hooks.hpp>
#include <cifarnet/train/trainer.hpp>

#include <filesystem>
#include <limits>
#include <string>

#include <unistd.h>

namespace trainer_test {

using namespace cifarnet;
namespace fs = std::filesystem;

using Net = Sequential<resnet::ConvBN<3, 4>, ReLU, resnet::BlockV1<4, 8, 2>, GlobalAvgPool, Dense<8, 5>>;
using M = Model<Net, backend::Reference>;
using Opt = optim::Chain<optim::WeightDecay, optim::ClipByGlobalNorm, optim::Momentum>;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("cifarnet_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

/// Synthetic batches drawn from an Rng whose state is checkpointed.
struct Source {
  Rng rng{5};
  train::Batch batch;
  int calls = 0, poison_at = -1;  ///< a NaN pixel in batch `poison_at` (corrupt data)
  const train::Batch& next() {
    batch.images = make_tensor<float>({8, 3, 6, 6}, DataFormat::NHWC);
    for (auto& v : batch.images) v = float(rng.uniform(0, 255));
    if (calls++ == poison_at) batch.images(3, 2, 2, 1) = std::numeric_limits<float>::quiet_NaN();
    batch.labels.resize(8);
    for (auto& l : batch.labels) l = std::int32_t(rng.uniform_int(5));
    return batch;
  }
};

/// One complete run: model, optimizer (clip + momentum), piecewise LR, EMA.
struct Run {
  double wd;
  M net{{3, 6, 6}, DataFormat::NHWC, {}, 3};
  Opt opt{net.parameters(), optim::WeightDecayOptions(wd), optim::ClipByGlobalNormOptions(5.0),
          optim::MomentumOptions().momentum(0.9)};
  optim::ExponentialMovingAverage<float> ema{net.parameters(), optim::ExponentialMovingAverageOptions(0.99)};
  Source src;
  train::Trainer<M> trainer;
  explicit Run(std::int64_t max_steps, double lr0 = 0.05, double weight_decay = 1e-3)
      : Run(train::TrainerOptions().max_steps(max_steps), lr0, weight_decay) {}
  explicit Run(train::TrainerOptions options, double lr0 = 0.05, double weight_decay = 1e-3)
      : wd(weight_decay), trainer(net, std::move(options)) {
    trainer.set_optimizer(opt, optim::piecewise_constant({6, 14}, {lr0, lr0 / 10, lr0 / 100}));
    trainer.add_update([this](Parameters<float>& p, std::int64_t step) { ema.apply(p, step); });
    trainer.add_state_slots(ema);
    trainer.add_rng("data", src.rng);
  }
  std::int64_t go() {
    return trainer.run([this]() -> const train::Batch& { return src.next(); });
  }
};

}  // namespace trainer_test
