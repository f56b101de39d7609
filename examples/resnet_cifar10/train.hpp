// examples/resnet_cifar10/train.hpp — the recipe's parts (run.cpp), typed
// on no backend: the network and its trainer come as a recipes::Session
// from the backend's translation unit (onednn.cpp, cuda.cpp: network.hpp),
// so the recipe compiles once and the four files build in parallel.
//
// The library does the recipe's work: the processes and their roles
// (recipes::Strategy: one process, MPI replicas or parameter servers), the
// devices (recipes/devices.hpp), the layout (train::choose_data_format), the
// learning-rate schedule by name (optim::make_schedule), the pipeline whose
// position every checkpoint records (train::stream_position_saveable) and its
// augmentation switch (PipelineOptions::augment). What is left here is the
// seed's flags and messages.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include <cifarnet/backend/onednn/conv2d.hpp>
#include <cifarnet/data/recipes.hpp>
#include <cifarnet/demo/synthetic_cifar.hpp>
#include <cifarnet/io/checkpoint.hpp>
#include <cifarnet/io/tfevents.hpp>
#include <cifarnet/optim/schedules.hpp>
#include <cifarnet/train/hooks.hpp>
#include <cifarnet/train/trainer.hpp>

#include "flags.hpp"

namespace resnet_cifar10 {

namespace fs = std::filesystem;

/// The training split's source: real CIFAR-10 (binary or TFRecord files)
/// or the built-in synthetic set.
struct DataSet {
  std::shared_ptr<const data::Cifar10Source> train, eval;
  bool synthetic = false;
};

/// The data of the run; the eval split must divide into eval batches (the seed's check).
inline DataSet load_data(const Flags& f) {
  DataSet d;
  if (f.data_dir.empty()) {
    std::cout << "No --data-dir given.\n"
              << how_to_get_data() << "Running on a small BUILT-IN SYNTHETIC data set instead ("
              << f.synthetic_examples
              << " training and 500 test images of 10 made-up classes): accuracy on it says nothing about "
                 "CIFAR-10.\n";
    d.train =
        std::make_shared<data::Cifar10Source>(data::synthetic_cifar(std::size_t(f.synthetic_examples), 1));
    d.eval = std::make_shared<data::Cifar10Source>(data::synthetic_cifar(500, 2));
    d.synthetic = true;
  } else {
    if (!fs::is_directory(f.data_dir))
      throw IoError("--data-dir '" + f.data_dir + "' is not a directory.\n" + how_to_get_data());
    // Binary or TFRecord files, as the directory holds (or --input-format says).
    const data::Cifar10Format format = data::parse_cifar10_format(f.input_format);
    d.train = std::make_shared<data::Cifar10Source>(f.data_dir, data::parse_split(f.train_split), format);
    d.eval = std::make_shared<data::Cifar10Source>(f.data_dir, data::Split::eval, format);
    std::cout << "Reading " << d.train->description() << "; evaluating on " << d.eval->description() << "\n";
  }
  const std::size_t n_eval = d.eval->size();
  if (n_eval % std::size_t(f.eval_batch_size) != 0)
    throw ConfigError("validation set size must be multiple of eval_batch_size (" + std::to_string(n_eval) +
                      " eval examples, --eval-batch-size " + std::to_string(f.eval_batch_size) + ")");
  return d;
}

/// The layout the chief decides: --data-format, else the job's checkpoint's,
/// else (a new job) measured with --data-format auto or the device's default.
inline train::FormatChoice choose_layout(const Flags& f, const NetworkBackend& backend) {
  std::optional<DataFormat> given;
  if (!f.data_format.empty() && f.data_format != "auto") given = parse_data_format(f.data_format);
  std::function<FormatPick()> measure;
  if (f.data_format == "auto")
    measure = [&] { return backend.pick_format(network_spec(f, DataFormat::NHWC)); };
  return train::choose_data_format(given, f.num_gpus > 0, f.job_dir, measure);
}

/// The epoch of the seed schedule's boundaries (epochs 82, 123 and 300), in
/// steps. As the seed computes it (cifar10_main.py): num_examples_per_epoch
/// ('train') = 45,000, whatever the files hold, divided with // by
/// train_batch_size x num_workers: 351 steps at batch 128 and one worker, so
/// boundaries 28,782 / 43,173 / 105,300. --schedule-from-counted-examples:
/// the examples actually read instead (40,000 for 'train': 312.5 steps,
/// boundaries 25,625 / 38,437 / 93,750), the fix the seed's author suggests
/// for the 45,000 that does not match the 40,000 of its 'train' split.
inline double schedule_steps_per_epoch(const Flags& f, const recipes::Strategy& st, std::size_t n_train) {
  if (f.schedule_from_counted_examples) return double(n_train) / double(f.train_batch_size);
  // The seed's num_workers: every process but the parameter servers.
  const std::int64_t workers = std::max(1, st.size() - st.chief_rank());
  return double(kSeedExamplesPerEpoch / (std::int64_t(f.train_batch_size) * workers));
}

/// The training pipeline's options: the seed's shuffle and batch, pad-crop-flip
/// when --use-distortion-for-training (the default), in the model's layout.
inline data::PipelineOptions train_pipeline_options(const Flags& f, DataFormat fmt) {
  data::PipelineOptions po = data::recipes::resnet_train_options(f.seed, std::size_t(f.train_batch_size));
  po.format = fmt;
  po.num_workers = f.num_inter_threads > 0 ? std::size_t(f.num_inter_threads) : 1;
  po.augment = f.use_distortion;
  // On GPUs the batches go up as bytes (a quarter of the PCIe bytes; the
  // model makes the floats there): the recipe's images are whole pixel values.
  po.byte_pixels = f.num_gpus > 0;
  return po;
}

/// The trainer's options from the flags (the strategy adds its own).
inline train::TrainerOptions trainer_options(const Flags& f, std::int64_t train_steps) {
  // TF-Slim's options: summaries at most every --save-summaries-secs, the
  // chief's Chrome traces (<job-dir>/tf_trace-<step>.json) and
  // --startup-delay-steps (every asynchronous worker but the chief waits
  // for global step N).
  return train::TrainerOptions()
      .max_steps(train_steps)
      .save_summaries_secs(f.save_summaries_secs)
      .trace_every_n_steps(f.trace_every_n_steps)
      .trace_dir(f.job_dir)
      .startup_delay_steps(f.startup_delay_steps);
}

/// The run's first line after the data: model, data, steps, schedule,
/// layout, arithmetic, processes and towers.
inline std::string describe_run(const Flags& f, const recipes::Strategy& st, recipes::Session& net,
                                const DataSet& data, std::int64_t train_steps, double steps_per_epoch,
                                const std::string& schedule, DataFormat fmt) {
  std::string precision = "fp32";
  if (f.precision == "bf16")
    precision = backend::onednn::cpu_has_bf16_convolutions()
                    ? "bf16 convolutions and conv outputs (fp32 weights, optimizer and other layers' "
                      "arithmetic)"
                    : "fp32 (--precision bf16 asked, but oneDNN has no bf16 kernels on this CPU: it needs "
                      "AVX-512)";
  std::ostringstream os;
  os << "ResNet-" << f.num_layers << " (" << net.trainer().parameters().num_trainable() << " parameters), "
     << (data.synthetic ? "SYNTHETIC data"
                        : "CIFAR-10 split '" + f.train_split + "' (" +
                              (data.train->tfrecords() ? "TFRecord" : "binary") + " files)")
     << " (" << data.train->size() << " training examples, " << data.eval->size() << " eval), batch "
     << f.train_batch_size << ", " << train_steps << " steps (" << double(train_steps) / steps_per_epoch
     << " epochs), lr " << f.learning_rate << " " << schedule << ", format " << layout_name(fmt) << ", "
     << precision
     << (f.conv_algorithm == "winograd" ? ", Winograd convolutions (--conv-algorithm winograd)" : "")
     << st.describe(f.train_batch_size);
  if (net.towers() > 0)
    os << ", " << net.towers() << " towers (one per GPU) of batch " << f.train_batch_size / f.num_gpus
       << ", gradients summed by " << net.tower_reducer();
  return os.str();
}

/// Evaluation on the eval split (moving BN statistics), as the estimator's
/// evaluate(), written to the chief's events at `step`.
inline train::EvalResult evaluate(recipes::Session& net, const Flags& f, const DataSet& data, DataFormat fmt,
                                  io::EventWriter& events, std::int64_t step) {
  data::PipelineOptions eo = data::recipes::resnet_eval_options(std::size_t(f.eval_batch_size));
  eo.format = fmt;
  eo.num_workers = 0;
  data::recipes::ResNetEvalT<data::Cifar10Source> pipe(data.eval, eo);
  const train::EvalResult r = net.evaluate(pipe);
  events.add_scalar("accuracy", r.precision(), step);
  events.add_scalar("eval/loss", r.loss, step);
  events.flush();
  return r;
}

/// The chief's hooks: examples/sec every 10 steps, loss and learning rate
/// every 100, summaries, checkpoints, the progress bar and --eval-every.
template <class Evaluate>
void add_chief_hooks(const std::function<void(std::shared_ptr<train::Hook>)>& add_hook, const Flags& f,
                     io::CheckpointManager& mgr, io::EventWriter& events, Evaluate evaluate) {
  add_hook(std::make_shared<train::ExamplesPerSecondHook>(10));
  add_hook(std::make_shared<train::LoggingHook>(100));
  add_hook(std::make_shared<train::SummaryHook>(events, 100));
  add_hook(std::make_shared<train::CheckpointHook>(mgr, f.save_checkpoints_steps, f.save_checkpoints_secs));
  add_hook(std::make_shared<train::ProgressBarHook>());
  if (f.log_every_n_steps > 0) add_hook(std::make_shared<train::SlimLogHook>(f.log_every_n_steps));
  if (f.eval_every > 0)
    add_hook(
        std::make_shared<train::LambdaHook>([&f, evaluate](train::TrainerBase&, const train::StepResult& r) {
          if (r.step % f.eval_every != 0) return;
          const auto e = evaluate();
          std::printf("step = %lld, eval accuracy = %.4f, eval loss = %.4f\n", static_cast<long long>(r.step),
                      e.precision(), e.loss);
          std::fflush(stdout);
        }));
}

}  // namespace resnet_cifar10
