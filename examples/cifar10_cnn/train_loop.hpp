// examples/cifar10_cnn/train_loop.hpp — the tutorial's training loop, shared
// by cifar10_train (one model) and cifar10_multi_gpu_train (towers of it):
// the flags both take, the input pipeline of distorted crops, gradient
// descent with the staircase decay, weight decay on local3/local4, the EMA
// of every weight, the loss averages and summaries, the step log line,
// checkpoints (with the pipeline's position) every 1,000 steps and resuming.
#pragma once

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <cifarnet/io/checkpoint.hpp>
#include <cifarnet/io/tfevents.hpp>
#include <cifarnet/optim/chain.hpp>
#include <cifarnet/optim/ema.hpp>
#include <cifarnet/optim/schedules.hpp>
#include <cifarnet/optim/sgd.hpp>
#include <cifarnet/optim/weight_decay.hpp>
#include <cifarnet/recipes/devices.hpp>
#include <cifarnet/recipes/session.hpp>
#include <cifarnet/train/hooks.hpp>
#include <cifarnet/train/trainer.hpp>

#include "../common/cifar10_download.hpp"
#include "cifar10.hpp"

namespace cifar10 {

/// The flags of the training programs.
struct TrainFlags : CommonFlags {
  std::string train_dir = "/tmp/cifar10_train";
  std::int64_t max_steps = 1000000;
  bool log_device_placement = false;
  int log_frequency = 10;
  std::uint64_t seed = 0;
  int num_preprocess_threads = 1;
  int keep_checkpoints = 5;
  examples::DownloadFlags download;
};

inline void add_train_flags(CLI::App& app, TrainFlags& f) {
  app.add_option("--train_dir", f.train_dir, "Directory where to write event logs and checkpoint.")
      ->capture_default_str();
  app.add_option("--max_steps", f.max_steps, "Number of batches to run.")->capture_default_str();
  app.add_flag("--log_device_placement", f.log_device_placement, "Whether to log device placement.");
  app.add_option("--log_frequency", f.log_frequency, "How often to log results to the console.")
      ->capture_default_str();
  add_common_flags(app, f);
  examples::add_download_flags(app, f.download, "--data_dir", '_');
  app.add_option("--seed", f.seed, "Seed of the initialization, shuffling and distortions.")
      ->capture_default_str();
  app.add_option("--num_preprocess_threads", f.num_preprocess_threads,
                 "Threads preparing distorted batches ahead of the model (0: on the training thread).")
      ->capture_default_str();
  app.add_option("--keep_checkpoints", f.keep_checkpoints, "How many checkpoints to keep (0: all).")
      ->capture_default_str();
}

/// --log_device_placement's line for the oneDNN CPU backend.
inline void log_cpu_placement(std::ostream& out) {
  out << recipes::describe_device<backend::OneDnn>() << "; every variable and op on /cpu:0\n";
}

inline void validate_train(const TrainFlags& f) {
  examples::validate_download(f.download, f.data_dir);
  validate_common(f, f.download.download);
  if (f.max_steps < 0) throw ConfigError("--max_steps must be >= 0, got " + std::to_string(f.max_steps));
  if (f.log_frequency <= 0)
    throw ConfigError("--log_frequency must be positive, got " + std::to_string(f.log_frequency));
  if (f.num_preprocess_threads < 0)
    throw ConfigError("--num_preprocess_threads must be >= 0, got " +
                      std::to_string(f.num_preprocess_threads));
  if (f.keep_checkpoints < 0)
    throw ConfigError("--keep_checkpoints must be >= 0, got " + std::to_string(f.keep_checkpoints));
}

/// The trainer's options: the tutorial's --max_steps.
inline train::TrainerOptions trainer_options(const TrainFlags& f) {
  return train::TrainerOptions().max_steps(f.max_steps);
}

/// Trains the network of `net` (a Model, or distributed::Towers of them, with
/// a trainer whose options carry --max_steps) with the tutorial's recipe on
/// batches of `batch` images; `what` names the model and where it runs for
/// the first line.
inline int train(const TrainFlags& f, recipes::Session& net, std::size_t batch, const std::string& what) {
  namespace fs = std::filesystem;
  // --download: fetch and unpack CIFAR-10 into --data_dir unless it is there
  // (the tutorial's maybe_download_and_extract).
  examples::download_if_asked(f.download, f.data_dir, std::cout);
  if (f.data_dir.empty()) explain_synthetic(std::cout);
  const Source src = load(f, data::Split::train_all);
  const std::size_t n_train = src.images->size();

  // The learning rate: lr * 0.1^floor(step / decay_steps), decay_steps =
  // int(batches per epoch * 350) as cifar10.py computes it (136,718 steps for
  // the 50,000 CIFAR-10 training images in batches of 128).
  const double num_batches_per_epoch = double(n_train) / double(batch);
  const std::int64_t decay_steps =
      std::max<std::int64_t>(1, std::int64_t(num_batches_per_epoch * kNumEpochsPerDecay));
  const optim::ExponentialDecay schedule(kInitialLearningRate, decay_steps, kLearningRateDecayFactor,
                                         /*staircase=*/true);

  // Every variable is trained; only local3/local4 weights are decayed (the tutorial's
  // _variable_with_weight_decay).
  optim::Chain<optim::WeightDecay, optim::GradientDescent> opt(
      net.trainer().parameters(),
      optim::WeightDecayOptions(kWeightDecay).decay(optim::Selection(cifar10_cnn_decayed())), {});
  optim::ExponentialMovingAverage<float> ema(net.trainer().parameters(),
                                             optim::ExponentialMovingAverageOptions(kMovingAverageDecay));
  // The tutorial's _add_loss_summaries: 0.9 averages of the losses (shadows
  // start at 0, as TF's for tensors that are not variables).
  optim::ScalarMovingAverage<float> avg_cross_entropy("cross_entropy"), avg_weight_loss("weight_loss"),
      avg_total_loss("total_loss");

  data::PipelineOptions po = data::recipes::tutorial_train_options(f.seed, batch);
  po.format = kFormat;
  po.num_workers = std::size_t(f.num_preprocess_threads);
  data::recipes::TutorialTrainT<data::ImageSetSource> pipe(src.images, po);

  train::TrainerBase& trainer = net.trainer();
  trainer.set_optimizer(opt, schedule);
  trainer.add_update([&](Parameters<float>& p, std::int64_t step) { ema.apply(p, step); });
  trainer.add_state_slots(ema);
  trainer.add_state_slots(avg_cross_entropy);
  trainer.add_state_slots(avg_weight_loss);
  trainer.add_state_slots(avg_total_loss);
  trainer.add_state(train::stream_position_saveable(pipe));

  std::cout << what << " (" << trainer.parameters().num_trainable() << " parameters) on " << src.description
            << ", batch " << batch << ", gradient descent lr " << kInitialLearningRate << " x"
            << kLearningRateDecayFactor << " every " << decay_steps << " steps (" << kNumEpochsPerDecay
            << " epochs), weight decay " << kWeightDecay << " on local3/local4 weights, EMA "
            << kMovingAverageDecay << ", shuffle buffer " << data::default_shuffle_buffer(n_train, batch)
            << " images, to step " << f.max_steps << "\n";

  fs::create_directories(f.train_dir);
  io::CheckpointManager mgr(f.train_dir, std::size_t(f.keep_checkpoints));
  for (const auto& w : mgr.warnings()) std::cout << "WARNING: " << w << "\n";
  trainer.restore_latest(mgr, &std::cout);
  if (trainer.global_step() >= f.max_steps) {
    std::cout << "Already trained to step " << trainer.global_step() << " (--max_steps " << f.max_steps
              << "): nothing to do.\n";
    return 0;
  }
  io::EventWriter events(f.train_dir);

  // Loss averages after every step; summaries every 100 steps.
  const std::int64_t summary_every = 100;
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  auto last_summary = std::chrono::steady_clock::now();
  train::Batch step_batch;       // the batch of the step the summaries describe
  Tensor<float> summary_images;  // its images as floats, when the pipeline hands out bytes
  std::int64_t last_summary_step = trainer.global_step();
  trainer.add_hook(
      std::make_shared<train::LambdaHook>([&](train::TrainerBase& t, const train::StepResult& r) {
        const double ce = avg_cross_entropy.apply(r.loss), wl = avg_weight_loss.apply(r.regularization),
                     tl = avg_total_loss.apply(r.total_loss);
        if (r.step % summary_every != 0) return;
        events.add_scalar("learning_rate", r.learning_rate, r.step);
        events.add_scalar("cross_entropy (raw)", r.loss, r.step);
        events.add_scalar("cross_entropy", ce, r.step);
        events.add_scalar("weight_loss (raw)", r.regularization, r.step);
        events.add_scalar("weight_loss", wl, r.step);
        events.add_scalar("total_loss (raw)", r.total_loss, r.step);
        events.add_scalar("total_loss", tl, r.step);
        const double dt = seconds_since(last_summary);
        if (dt > 0) events.add_scalar("global_step/sec", double(r.step - last_summary_step) / dt, r.step);
        // The tutorial's input summary (tf.summary.image('images', images)
        // in distorted_inputs: the first 3 of the batch, as the model sees
        // them) and its _activation_summary of each layer's output (one
        // model; towers show none).
        if (step_batch.has_pixels()) data::pixels_to_images(step_batch, kFormat, summary_images);
        const Tensor<float>& shown = step_batch.has_pixels() ? summary_images : step_batch.images;
        static_assert(kFormat == DataFormat::NHWC, "add_images takes interleaved (NHWC) images");
        if (shown.size() > 0) {
          const Shape s = shape_of(shown, kFormat);
          events.add_images("images", shown.data(), s.n, s.h, s.w, s.c, r.step);
        }
        for (const std::string& tap : cifar10_cnn_taps())
          if (const Tensor<float>* a = net.activation(tap))
            events.add_activation_summary(tap, a->data(), a->size(), r.step);
        t.visit_parameters([&](const ParamInfo& p, const float* v, const float* g) {
          events.add_histogram(p.name, v, p.size, r.step);
          if (g) events.add_histogram(p.name + "/gradients", g, p.size, r.step);
        });
        events.flush();
        last_summary = std::chrono::steady_clock::now();
        last_summary_step = r.step;
      }));
  trainer.add_hook(std::make_shared<train::StepLogHook>(f.log_frequency));
  trainer.add_hook(std::make_shared<train::CheckpointHook>(mgr, 1000));
  trainer.add_hook(std::make_shared<train::ProgressBarHook>());

  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t start_step = trainer.global_step();
  trainer.run([&]() -> const train::Batch& {  // the step's batch stays in step_batch for the summaries
    if (!pipe.next(step_batch)) step_batch.labels.clear();
    return step_batch;
  });
  events.flush();
  const double secs = seconds_since(t0);
  std::printf("Trained steps %lld..%lld in %.1f s (%.1f examples/sec)\n", static_cast<long long>(start_step),
              static_cast<long long>(trainer.global_step()), secs,
              double(trainer.global_step() - start_step) * double(batch) / secs);
  return 0;
}

}  // namespace cifar10
