// cifarnet/recipes/airbench.hpp — the airbench94 CIFAR-10 recipe (public
// repository KellerJordan/cifar10-airbench, airbench94_muon.py: 94.01 % mean
// over 200 runs in 8 epochs) as one call:
//
//   const auto r = recipes::train_airbench<backend::OneDnn>(train_set, test_set, opts, on_epoch);
//
// What it does, as the original (docs/SPEEDRUN.md has the recipe's facts):
// - data: pixels / 255 normalised by CIFAR-10's mean and std; each epoch a
//   fresh permutation, batches of 2,000 (the last partial one dropped),
//   every image mirrored in one fixed half of the epochs and translated by
//   up to 2 px with reflect padding (data::AlternatingFlip,
//   data::RandomTranslate<2>);
// - network: Airbench94 (models/airbench.hpp), initialised by
//   airbench_init (below) from the first 5,000 training images;
// - loss: cross-entropy with label smoothing 0.2, summed over the batch;
// - optimizers: Muon (momentum 0.6, Nesterov, lr 0.24) for the 3×3 filters;
//   Nesterov SGD (momentum 0.85) with weight decay 2e-6·batch/lr for the
//   whitening bias (lr 0.053, trained for the first 3 epochs only), BN's
//   shifts (0.053) and the head (0.67); every rate decays linearly to 0
//   (the whitening bias's over its 3 epochs);
// - evaluation: accuracy on the test set after every epoch, and at the end
//   with test-time augmentation level 2 (data/tta.hpp).
// train_seconds counts the whitening initialisation and the training steps
// (data augmentation included), not the evaluations: the reference's
// definition. Before the clock starts, `warmup_steps` untimed forward and
// backward passes of one batch (the reference's short warm-up: it runs two
// throwaway steps so that its kernels are compiled) let oneDNN create its
// kernels and the model size its buffers; the model's state is restored
// after them and the weights are initialised afterwards, so the run trains
// the same as without.
//
// The whitening filters never receive a gradient, and the whitening bias
// none after its epochs (Parameters::set_requires_grad, as the reference's
// requires_grad): from then on backward stops at the first group's
// convolution, which computes no input gradient.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/filter_init.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/data/image.hpp"
#include "cifarnet/data/in_memory.hpp"
#include "cifarnet/data/tta.hpp"
#include "cifarnet/loss/label_smoothing.hpp"
#include "cifarnet/loss/losses.hpp"
#include "cifarnet/models/airbench.hpp"
#include "cifarnet/nn/model.hpp"
#include "cifarnet/optim/chain.hpp"
#include "cifarnet/optim/groups.hpp"
#include "cifarnet/optim/momentum.hpp"
#include "cifarnet/optim/muon.hpp"
#include "cifarnet/optim/schedules.hpp"
#include "cifarnet/optim/select.hpp"
#include "cifarnet/optim/weight_decay.hpp"

namespace cifarnet {
namespace recipes {

/// The recipe's settings; the defaults are airbench94_muon.py's.
struct AirbenchOptions {
  std::size_t batch_size = 2000;
  double epochs = 8;              ///< training length (a fraction ends mid-epoch)
  double whiten_bias_epochs = 3;  ///< the whitening bias trains this long
  double filter_lr = 0.24, filter_momentum = 0.6;
  double bias_lr = 0.053, head_lr = 0.67, sgd_momentum = 0.85;
  double weight_decay = 2e-6;  ///< × batch size / the group's lr, as the original
  double label_smoothing = 0.2;
  int tta_level = 2;  ///< of the final evaluation (0, 1 or 2)
  std::size_t whitening_images = 5000;
  int warmup_steps = 2;  ///< untimed forward+backward passes before the clock starts
  ConvPrecision conv_precision = ConvPrecision::F32;                 ///< BF16: convolutions in bf16
  optim::MuonPrecision muon_precision = optim::MuonPrecision::Bf16;  ///< the recipe's Newton-Schulz in bf16
  DataFormat format = DataFormat::NHWC;
  std::uint64_t seed = 0;

  /// ConfigError naming the field unless the settings make a run.
  void validate(std::size_t train_size) const {
    if (batch_size == 0) throw ConfigError("airbench: batch size must be positive");
    if (train_size < batch_size)
      throw ConfigError(cifarnet::detail::concat("airbench: ", train_size,
                                                 " training images make no full batch of ", batch_size));
    if (!(epochs > 0) || !std::isfinite(epochs)) throw ConfigError("airbench: epochs must be positive");
    if (tta_level < 0 || tta_level > 2) throw ConfigError("airbench: TTA level must be 0, 1 or 2");
    if (whitening_images == 0) throw ConfigError("airbench: whitening needs at least one image");
    if (warmup_steps < 0) throw ConfigError("airbench: warm-up steps must be >= 0");
  }
};

/// One epoch's line: the last batch's mean loss and accuracy, the test
/// accuracy without TTA, the epoch's training seconds and images per second.
struct AirbenchEpoch {
  int epoch = 0;
  double train_loss = 0, train_acc = 0, val_acc = 0, seconds = 0, images_per_second = 0;
};

/// Where training is within an epoch (after each step; a progress bar's input).
struct AirbenchProgress {
  int epoch = 0;           ///< from 1
  std::int64_t step = 0;   ///< steps done in this epoch
  std::int64_t steps = 0;  ///< steps this epoch will take
};

struct AirbenchResult {
  double tta_val_acc = 0, val_acc = 0;
  double train_seconds = 0, tta_seconds = 0;
  double warmup_seconds = 0;  ///< the untimed warm-up (not in train_seconds)
  std::int64_t steps = 0;
  std::vector<AirbenchEpoch> epochs;
};

/// CIFAR-10's per-channel mean and standard deviation (of pixels / 255).
inline constexpr float kCifarMean[3] = {0.4914f, 0.4822f, 0.4465f};
inline constexpr float kCifarStd[3] = {0.2470f, 0.2435f, 0.2616f};

/// `set` (CHW bytes) as normalised HWC float images.
inline data::InMemoryDataset airbench_dataset(const data::ImageSet& set) {
  const auto g = set.geometry;
  if (g.channels != 3) throw ConfigError("airbench: images must have 3 channels");
  std::vector<Image> images(set.size());
  const std::size_t hw = g.height * g.width;
  for (std::size_t i = 0; i < set.size(); ++i) {
    Image img(g.height, g.width, 3);
    const std::uint8_t* src = set.image(i);
    for (std::size_t p = 0; p < hw; ++p)
      for (std::size_t c = 0; c < 3; ++c)
        img.data[p * 3 + c] = (float(src[c * hw + p]) / 255.0f - kCifarMean[c]) / kCifarStd[c];
    images[i] = std::move(img);
  }
  return data::InMemoryDataset(std::move(images), set.labels);
}

/// The recipe's initial weights, drawn from `seed`: PyTorch's default
/// U(±1/√fan_in) for every convolution, the whitening bias and the head;
/// identity (Dirac) kernels in the first `in` filters of each 3×3
/// convolution; the head scaled to unit standard deviation; the whitening
/// filters from the 2×2 patch covariance of `whitening_images`, an
/// (n, 3, h, w) tensor of normalised training images in the model's format
/// (the recipe: the first 5,000). BN keeps scale 1 and shift 0.
template <class M>
void airbench_init(M& net, const Tensor<float>& whitening_images, std::uint64_t seed, double eps = 5e-4) {
  auto& P = net.host_parameters();
  Rng rng(seed);
  // U(±1/√fan_in): PyTorch's kaiming_uniform_(a=√5) for weights, and its
  // bias rule; the fan-in of an HWIO filter bank is kh·kw·in.
  for (std::size_t id = 0; id < P.infos().size(); ++id) {
    const auto& info = P.info(id);
    if (!info.trainable) continue;
    const auto& s = info.shape;
    const bool filters = s.size() == 4, matrix = s.size() == 2;
    std::size_t fan_in = 0;
    if (filters)
      fan_in = s[0] * s[1] * s[2];
    else if (matrix)
      fan_in = s[0];
    else if (info.name == "whiten/biases")
      fan_in = 2 * 2 * 3;
    else
      continue;  // BN's gamma (1) and beta (0) keep their initial values
    const double bound = 1.0 / std::sqrt(double(fan_in));
    float* w = P.value(id);
    for (std::size_t i = 0; i < info.size; ++i) w[i] = float(rng.uniform(-bound, bound));
    if (filters && s[0] == 3 && s[1] == 3) dirac_init(w, 3, 3, s[2], s[3]);
    if (matrix) {  // the head: unit standard deviation
      double mean = 0, sq = 0;
      for (std::size_t i = 0; i < info.size; ++i) mean += w[i];
      mean /= double(info.size);
      for (std::size_t i = 0; i < info.size; ++i) sq += (w[i] - mean) * (w[i] - mean);
      const double sd = std::sqrt(sq / double(info.size - 1));
      for (std::size_t i = 0; i < info.size; ++i) w[i] = float(w[i] / sd);
    }
  }
  const Whitening<float> wh = whitening_filters(whitening_images, net.format(), 2, 2, eps);
  float* dst = P.value(P.id("whiten/weights"));
  for (std::size_t i = 0; i < wh.filters.size(); ++i) dst[i] = wh.filters[i];
}

namespace detail {
/// The examples of `set` in order, in batches of `batch` (the last one
/// smaller), in `fmt`: an EpochLoader without stages or shuffle.
inline data::EpochLoader<> airbench_in_order(const data::InMemoryDataset& set, std::size_t batch,
                                             DataFormat fmt) {
  data::EpochLoaderOptions o;
  o.batch_size = batch;
  o.shuffle = false;
  o.drop_last = false;
  o.format = fmt;
  return data::EpochLoader<>(set, o);
}

/// Accuracy of `net` on `set` with TTA `level`, in batches of `batch`.
template <class M>
double airbench_accuracy(M& net, const data::InMemoryDataset& set, int level, std::size_t batch) {
  std::size_t correct = 0;
  auto loader = airbench_in_order(set, batch, net.format());
  data::Batch b;
  while (loader.next(b)) {
    const Tensor<float> z =
        data::tta_logits([&](const Tensor<float>& v) -> Tensor<float> { return net.forward(v, Mode::Infer); },
                         b.images, net.format(), level);
    correct += count_correct(z, b.labels);
  }
  return double(correct) / double(set.size());
}
}  // namespace detail

/// Trains Airbench94 on backend B with the recipe and evaluates it (see the
/// file comment); `on_epoch` sees each epoch's line as it ends, `on_step`
/// the progress after each step (inside the timed region: keep it cheap).
template <class B>
AirbenchResult train_airbench(const data::InMemoryDataset& train, const data::InMemoryDataset& test,
                              const AirbenchOptions& opt,
                              const std::function<void(const AirbenchEpoch&)>& on_epoch = {},
                              const std::function<void(const AirbenchProgress&)>& on_step = {}) {
  opt.validate(train.size());
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  AirbenchResult result;

  NetOptions nopts = airbench_options();
  nopts.with_conv_precision(opt.conv_precision);
  Model<Airbench94, B> net({3, 32, 32}, opt.format, nopts, opt.seed);

  data::EpochLoaderOptions lopts;
  lopts.batch_size = opt.batch_size;
  lopts.seed = opt.seed;
  lopts.format = opt.format;
  data::EpochLoader<data::AlternatingFlip, data::RandomTranslate<2>> loader(
      train, lopts, {data::AlternatingFlip{opt.seed}, data::RandomTranslate<2>{}});
  const std::int64_t per_epoch = std::int64_t(loader.batches_per_epoch());
  const std::int64_t total = std::int64_t(std::ceil(opt.epochs * double(per_epoch)));
  const std::int64_t whiten_steps = std::int64_t(std::ceil(opt.whiten_bias_epochs * double(per_epoch)));

  // One parameter group per optimizer (optim/groups.hpp), each rate linear
  // to 0 over its length: Nesterov SGD with weight decay for the whitening
  // bias (its first epochs, then no gradient), BN's shifts and the head;
  // Muon for the 3x3 filters. Stepped in that order.
  auto& P = net.parameters();
  const double wd = opt.weight_decay * double(opt.batch_size);
  using Sgd = optim::Chain<optim::WeightDecay, optim::Momentum>;
  const auto sgd = optim::MomentumOptions().momentum(opt.sgd_momentum).nesterov(true);
  optim::ParamGroups<float> groups(P);
  auto add_sgd = [&](const char* name, const char* pattern, double lr, std::int64_t steps) {
    const auto sel = optim::variables_to_train({pattern});
    groups.add(name, sel, std::make_unique<Sgd>(P, sel, optim::WeightDecayOptions(wd / lr), sgd),
               optim::polynomial_decay(lr, steps), {steps < total ? steps : 0});
  };
  const std::size_t whiten_w = P.id("whiten/weights"), whiten_b = P.id("whiten/biases");
  P.set_requires_grad(whiten_w, false);  // never trained
  if (whiten_steps > 0)
    add_sgd("whiten_bias", "whiten/biases", opt.bias_lr, whiten_steps);
  else
    P.set_requires_grad(whiten_b, false);
  add_sgd("bn_shifts", "*/beta", opt.bias_lr, total);
  add_sgd("head", "head/weights", opt.head_lr, total);
  const auto filter_sel = optim::variables_to_train({"block*/weights"});
  auto& filters = groups.add(
      "filters", filter_sel,
      std::make_unique<optim::Muon<float>>(
          P, optim::MuonOptions().momentum(opt.filter_momentum).nesterov(true).precision(opt.muon_precision),
          filter_sel),
      optim::polynomial_decay(opt.filter_lr, total));
  filters.use_backend(net.device());

  data::Batch batch;
  Tensor<float> dlogits;
  const CrossEntropyOptions ce{opt.label_smoothing, Reduction::Sum};

  // Untimed warm-up (see the file comment): forward and backward only, so
  // the weights do not move; BN's moving statistics are put back.
  auto t0 = Clock::now();
  if (opt.warmup_steps > 0) {
    const Eigen::ArrayXf state = P.state();
    loader.start_epoch(0);
    loader.next(batch);
    for (int i = 0; i < opt.warmup_steps; ++i) {
      const Tensor<float>& logits = net.forward(batch.images, Mode::Train);
      softmax_cross_entropy(logits, batch.labels, ce, &dlogits);
      net.backward(dlogits);
    }
    P.state() = state;
    result.warmup_seconds = seconds_since(t0);
  }

  // The whitening filters from the first images (timed, as the original).
  t0 = Clock::now();
  data::Batch first;
  detail::airbench_in_order(train, std::min(opt.whitening_images, train.size()), opt.format).next(first);
  airbench_init(net, first.images, opt.seed);
  result.train_seconds += seconds_since(t0);

  std::int64_t step = 0;
  for (int epoch = 0; step < total; ++epoch) {
    t0 = Clock::now();
    loader.start_epoch(std::uint64_t(epoch));
    AirbenchEpoch line;
    line.epoch = epoch + 1;
    std::size_t images = 0;
    AirbenchProgress progress{epoch + 1, 0, std::min(per_epoch, total - step)};
    while (step < total && loader.next(batch)) {
      const Tensor<float>& logits = net.forward(batch.images, Mode::Train);
      const float loss = softmax_cross_entropy(logits, batch.labels, ce, &dlogits);
      line.train_loss = double(loss) / double(batch.size());
      line.train_acc = double(count_correct(logits, batch.labels)) / double(batch.size());
      net.backward(dlogits);
      groups.step(P, step);
      ++step;
      images += batch.size();
      ++progress.step;
      if (on_step) on_step(progress);
    }
    line.seconds = seconds_since(t0);
    result.train_seconds += line.seconds;
    line.images_per_second = double(images) / line.seconds;
    line.val_acc = detail::airbench_accuracy(net, test, 0, 2000);
    result.val_acc = line.val_acc;
    result.epochs.push_back(line);
    if (on_epoch) on_epoch(line);
  }
  result.steps = step;
  t0 = Clock::now();
  result.tta_val_acc = detail::airbench_accuracy(net, test, opt.tta_level, 2000);
  result.tta_seconds = seconds_since(t0);
  return result;
}

}  // namespace recipes
}  // namespace cifarnet
