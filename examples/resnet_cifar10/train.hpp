// examples/resnet_cifar10/train.hpp — the program's flags, their validation and
// the training run, templated on the backend: main.cpp runs it on oneDNN
// (--num-gpus 0) and, in a build with the CUDA backend, cuda.cpp instantiates
// it for backend::Cuda (--num-gpus 1), each in its own translation unit so the
// two models compile in parallel.
//
// The library does the recipe's work: the processes and their roles
// (recipes::Strategy: one process, MPI replicas or parameter servers), the
// devices (recipes/devices.hpp), the layout (train::choose_data_format), the
// learning-rate schedule by name (optim::make_schedule), the pipeline whose
// position every checkpoint records (train::stream_position_saveable) and its
// augmentation switch (PipelineOptions::augment). What is left here is the
// seed's flags and messages.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/data/recipes.hpp>
#include <cifarnet/demo/synthetic_cifar.hpp>
#include <cifarnet/distributed/towers.hpp>
#include <cifarnet/io/checkpoint.hpp>
#include <cifarnet/io/tfevents.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/recipes/devices.hpp>
#include <cifarnet/recipes/strategy.hpp>
#include <cifarnet/train/hooks.hpp>
#include <cifarnet/train/placement.hpp>
#include <cifarnet/train/trainer.hpp>

#include "../common/cifar10_download.hpp"
#include "../common/cifar10_help.hpp"

namespace resnet_cifar10 {

namespace fs = std::filesystem;
using namespace cifarnet;

/// Where the data must be and how to get them (--data-dir errors, the synthetic fallback).
inline std::string how_to_get_data() {
  return examples::how_to_get_cifar10("--data-dir", /*tfrecords=*/true);
}

/// The images the model sees.
inline constexpr InputShape kInput{3, 32, 32};

struct Flags {
  std::string data_dir, job_dir, variable_strategy = "CPU", data_format, schedule = "seed",
                                 train_split = "train", precision = "fp32", input_format = "auto";
  examples::DownloadFlags download;
  int num_gpus = 1, num_layers = 44, num_intra_threads = 0, num_inter_threads = 0;
  std::int64_t train_steps = 80000, eval_every = 0, save_checkpoints_steps = 0;
  int train_batch_size = 128, eval_batch_size = 100, keep_checkpoints = 5, synthetic_examples = 2560;
  double momentum = 0.9, weight_decay = 2e-4, learning_rate = 0.1, batch_norm_decay = 0.997,
         batch_norm_epsilon = 1e-5, epochs = 0, max_seconds = 0, save_checkpoints_secs = 600,
         save_summaries_secs = 0;
  std::int64_t trace_every_n_steps = 0;
  std::int64_t startup_delay_steps = 0;  // TF-Slim's: worker k starts at global step k * N (async)
  bool use_distortion = true, sync = false, log_device_placement = false, sync_batch_norm = false;
  bool overlap_allreduce = true, soft_placement = true;
  bool deterministic = false, allow_tf32 = false;  // cuDNN convolution options (CUDA backend)
  double collective_timeout = 600;
  int allreduce_bucket_kb = 1024, num_ps = 1;
  std::uint64_t seed = 0;
};

/// The seed's validations (cifar10_main.py), with its messages.
inline void validate(const Flags& f, const recipes::Strategy& st) {
  if (f.num_gpus < 0) throw ConfigError("Invalid GPU count: \"--num-gpus\" must be 0 or a positive integer.");
  if (f.num_gpus == 0 && f.variable_strategy == "GPU")
    throw ConfigError("num-gpus=0, CPU must be used as parameter server. Set --variable-strategy=CPU.");
  if ((f.num_layers - 2) % 6 != 0 || f.num_layers < 8) throw ConfigError("Invalid --num-layers parameter.");
  if (f.num_gpus != 0 && f.train_batch_size % f.num_gpus != 0)
    throw ConfigError("--train-batch-size must be multiple of --num-gpus.");
  if (f.num_gpus != 0 && f.eval_batch_size % f.num_gpus != 0)
    throw ConfigError("--eval-batch-size must be multiple of --num-gpus.");
  if (st.size() > 1 && !st.async() &&
      f.train_batch_size % st.size() != 0)  // the towers' check, one per process
    throw ConfigError(
        "--train-batch-size must be multiple of the number of MPI processes (--train-batch-size " +
        std::to_string(f.train_batch_size) + ", mpirun -np " + std::to_string(st.size()) + ").");
  if (!(f.collective_timeout > 0)) throw ConfigError("--collective-timeout must be positive.");
  if (f.allreduce_bucket_kb < 4)
    throw ConfigError("--allreduce-bucket-kb must be at least 4, got " +
                      std::to_string(f.allreduce_bucket_kb) + ".");
  if (f.precision != "fp32" && f.precision != "bf16")
    throw ConfigError("--precision '" + f.precision + "': expected fp32 or bf16.");
  if (f.train_batch_size <= 0) throw ConfigError("--train-batch-size must be positive.");
  if (f.eval_batch_size <= 0) throw ConfigError("--eval-batch-size must be positive.");
  if (f.train_steps < 0) throw ConfigError("--train-steps must be >= 0.");
  if (!(f.learning_rate > 0) || !std::isfinite(f.learning_rate))
    throw ConfigError("--learning-rate must be a positive number.");
  if (f.momentum < 0 || !std::isfinite(f.momentum)) throw ConfigError("--momentum must be >= 0.");
  if (f.weight_decay < 0 || !std::isfinite(f.weight_decay)) throw ConfigError("--weight-decay must be >= 0.");
  if (!(f.batch_norm_decay > 0 && f.batch_norm_decay < 1))
    throw ConfigError("--batch-norm-decay must be in (0, 1).");
  if (!(f.batch_norm_epsilon > 0)) throw ConfigError("--batch-norm-epsilon must be positive.");
  if (f.epochs < 0) throw ConfigError("--epochs must be >= 0.");
  if (!(f.save_summaries_secs >= 0)) throw ConfigError("--save-summaries-secs must be >= 0.");
  if (f.trace_every_n_steps < 0) throw ConfigError("--trace-every-n-steps must be >= 0.");
  if (f.startup_delay_steps < 0) throw ConfigError("--startup-delay-steps must be >= 0.");
  examples::validate_download(f.download, f.data_dir);
  if (f.sync && f.num_gpus <= 1 && st.size() == 1)
    std::cerr
        << "note: --sync has no effect in a single process (synchronous training is the only mode here)\n";
  if (f.sync_batch_norm && st.size() == 1)
    std::cerr << "note: --sync-batch-norm has no effect in a single process\n";
  if (st.async() && f.sync_batch_norm)
    throw ConfigError(
        "--sync-batch-norm needs --sync: asynchronous workers do not take their steps together.");
}

/// Soft placement (the seed's allow_soft_placement=True): with fewer GPUs
/// present than --num-gpus asks for, the ones present are used (the CPU when
/// none) and run() says so; --no-soft-placement makes it an error. Sets
/// f.num_gpus to the GPUs used. The checks that depend on the device follow.
inline train::GpuPlacement place_devices(Flags& f, const recipes::Strategy& st) {
  train::GpuPlacement p = recipes::place_on_available_gpus(f.num_gpus, f.soft_placement);
  f.num_gpus = p.used;
  if (f.num_gpus > 1 && st.size() > 1)
    throw ConfigError("--num-gpus " + std::to_string(f.num_gpus) +
                      " under mpirun: give each process one GPU (--num-gpus 1, one process per GPU); towers "
                      "over several GPUs are for a single process.");
  if (f.precision == "bf16" && f.num_gpus > 0)
    throw ConfigError(
        "--precision bf16: bf16 convolutions are a CPU (oneDNN) option; use --num-gpus 0, or "
        "--precision fp32 on the GPU.");
  return p;
}

/// The flags' distribution options.
inline recipes::StrategyOptions strategy_options(const Flags& f) {
  return recipes::StrategyOptions()
      .sync(f.sync)
      .num_ps(f.num_ps)
      .collective_timeout(f.collective_timeout)
      .allreduce_bucket_bytes(std::size_t(std::max(0, f.allreduce_bucket_kb)) * 1024)
      .overlap_allreduce(f.overlap_allreduce)
      .sync_batch_norm(f.sync_batch_norm);
}

/// --download: the chief fetches and unpacks CIFAR-10 into --data-dir when
/// it is not there yet; under mpirun every rank waits for it.
inline void fetch_data(const Flags& f, recipes::Strategy& st) {
  if (!f.download.download) return;
  if (st.chief()) examples::download_if_asked(f.download, f.data_dir, std::cout);
  st.barrier("waiting for the chief's --download");
}

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

/// The towers' gradient sum for --num-gpus N > 1 under --variable-strategy
/// (distributed::VariableStrategy): CPU on the host, GPU with NCCL over the
/// towers' devices (cuda_towers.cpp).
std::unique_ptr<distributed::TowerReducer<float>> make_tower_reducer(int gpus,
                                                                     distributed::VariableStrategy v);

/// The network of a run: one model, or (kTowers, --num-gpus N > 1) N towers,
/// tower i on GPU i, their gradients summed with NCCL when the build has it.
template <class Net, bool kTowers>
std::unique_ptr<Net> make_net(const Flags& f, DataFormat fmt, const NetOptions& opts) {
  if constexpr (kTowers) {
    using Dev = Device<typename Net::Backend>;
    return std::make_unique<Net>(
        std::size_t(f.num_gpus), kInput, fmt, opts, f.seed,
        [](std::size_t i) { return std::make_unique<Dev>(int(i)); },
        make_tower_reducer(f.num_gpus, distributed::parse_variable_strategy(f.variable_strategy)));
  } else {
    return std::make_unique<Net>(kInput, fmt, opts, f.seed);
  }
}

inline NetOptions net_options(const Flags& f) {
  NetOptions opts = resnet_options(f.num_layers, f.batch_norm_decay, f.batch_norm_epsilon);
  if (f.precision == "bf16") opts.with_conv_precision(ConvPrecision::BF16);
  return opts;
}

/// The layout the chief decides: --data-format, else the job's checkpoint's,
/// else the device's default.
inline train::FormatChoice choose_layout(const Flags& f) {
  std::optional<DataFormat> given;
  if (!f.data_format.empty()) given = parse_data_format(f.data_format);
  return train::choose_data_format(given, f.num_gpus > 0, f.job_dir);
}

/// The training pipeline's options: the seed's shuffle and batch, pad-crop-flip
/// when --use-distortion-for-training (the default), in the model's layout.
inline data::PipelineOptions train_pipeline_options(const Flags& f, DataFormat fmt) {
  data::PipelineOptions po = data::recipes::resnet_train_options(f.seed, std::size_t(f.train_batch_size));
  po.format = fmt;
  po.num_workers = f.num_inter_threads > 0 ? std::size_t(f.num_inter_threads) : 1;
  po.augment = f.use_distortion;
  return po;
}

/// The trainer's options from the flags (the strategy adds its own).
inline train::TrainerOptions trainer_options(const Flags& f, std::int64_t train_steps) {
  // TF-Slim's options: summaries at most every --save-summaries-secs, the
  // chief's Chrome traces (<job-dir>/tf_trace-<step>.json) and
  // --startup-delay-steps (asynchronous worker k waits for step k * N).
  return train::TrainerOptions()
      .max_steps(train_steps)
      .save_summaries_secs(f.save_summaries_secs)
      .trace_every_n_steps(f.trace_every_n_steps)
      .trace_dir(f.job_dir)
      .startup_delay_steps(f.startup_delay_steps);
}

/// The run's first line after the data: model, data, steps, schedule,
/// layout, arithmetic, processes and towers.
template <class Net>
std::string describe_run(const Flags& f, const recipes::Strategy& st, Net& net, const DataSet& data,
                         std::int64_t train_steps, double steps_per_epoch, const std::string& schedule,
                         DataFormat fmt) {
  std::string precision = "fp32";
  if (f.precision == "bf16")
    precision = backend::onednn::cpu_has_bf16_convolutions()
                    ? "bf16 convolutions (fp32 weights, optimizer and other layers)"
                    : "fp32 (--precision bf16 asked, but oneDNN has no bf16 kernels on this CPU: it needs "
                      "AVX-512)";
  std::ostringstream os;
  os << "ResNet-" << f.num_layers << " (" << net.parameters().num_trainable() << " parameters), "
     << (data.synthetic ? "SYNTHETIC data"
                        : "CIFAR-10 split '" + f.train_split + "' (" +
                              (data.train->tfrecords() ? "TFRecord" : "binary") + " files)")
     << " (" << data.train->size() << " training examples, " << data.eval->size() << " eval), batch "
     << f.train_batch_size << ", " << train_steps << " steps (" << double(train_steps) / steps_per_epoch
     << " epochs), lr " << f.learning_rate << " " << schedule << ", format " << layout_name(fmt) << ", "
     << precision << st.describe(f.train_batch_size);
  if constexpr (recipes::is_towers<Net>::value)
    os << ", " << net.size() << " towers (one per GPU) of batch " << f.train_batch_size / f.num_gpus
       << ", gradients summed by " << net.reducer().name();
  return os.str();
}

/// Evaluation on the eval split (moving BN statistics), as the estimator's
/// evaluate(), written to the chief's events at `step`.
template <class Net>
train::EvalResult evaluate(Net& net, const Flags& f, const DataSet& data, DataFormat fmt,
                           io::EventWriter& events, std::int64_t step) {
  data::PipelineOptions eo = data::recipes::resnet_eval_options(std::size_t(f.eval_batch_size));
  eo.format = fmt;
  eo.num_workers = 0;
  data::recipes::ResNetEvalT<data::Cifar10Source> pipe(data.eval, eo);
  const train::EvalResult r = train::evaluate(net, pipe);
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

/// The whole run on backend B (backend::OneDnn, or backend::Cuda for
/// --num-gpus 1, or with kTowers one tower per GPU for --num-gpus N > 1).
template <class B, bool kTowers = false>
int run(const Flags& f, recipes::Strategy& st, const train::GpuPlacement& gpus) {
  // The layout, decided by the chief and taken by every rank, on the first line.
  train::FormatChoice layout;
  if (st.chief()) layout = choose_layout(f);
  st.broadcast_from_chief(layout.format, "data format broadcast");
  const DataFormat fmt = layout.format;
  std::cout << layout.describe() << "\n";
  if (!gpus.notice.empty()) std::cout << gpus.notice << "\n";
  st.set_intra_op_threads(f.num_intra_threads);
  using One = Model<ResNetCifar<>, B>;
  if (st.parameter_server()) {  // asynchronous: the variables of the workers' model live here
    One server_net(kInput, fmt, net_options(f), f.seed);
    return st.serve(server_net.parameters(), optim::MomentumOptions().momentum(f.momentum), std::cerr);
  }
  if (f.log_device_placement) std::cout << recipes::describe_device<B>() << "\n";

  const DataSet data = load_data(f);
  const std::size_t n_train = data.train->size();
  const double steps_per_epoch = double(n_train) / double(f.train_batch_size);
  const std::int64_t train_steps =
      f.epochs > 0 ? std::int64_t(f.epochs * double(n_train / std::size_t(f.train_batch_size)))
                   : f.train_steps;
  const optim::NamedSchedule schedule =
      optim::make_schedule(f.schedule, {f.learning_rate, train_steps, steps_per_epoch, f.epochs > 0});

  using Net = std::conditional_t<kTowers, distributed::Towers<One>, One>;
  const std::unique_ptr<Net> net_owner = make_net<Net, kTowers>(f, fmt, net_options(f));
  Net& net = *net_owner;
  recipes::set_cuda_conv_options(net, f.deterministic, f.allow_tf32);  // before the first convolution
  data::recipes::ResNetTrainT<data::Cifar10Source> pipe(data.train, train_pipeline_options(f, fmt));
  std::cout << describe_run(f, st, net, data, train_steps, steps_per_epoch, schedule.description, fmt)
            << "\n";

  // The seed's L2 term over every trainable parameter, then momentum.
  train::Trainer<Net> trainer(net, st.trainer_options(trainer_options(f, train_steps), f.max_seconds));
  st.set_momentum_optimizer(trainer, net, optim::WeightDecayOptions(f.weight_decay),
                            optim::MomentumOptions().momentum(f.momentum), schedule.schedule);
  trainer.add_state(train::stream_position_saveable(pipe));
  trainer.add_state(train::data_format_saveable(fmt));  // a resume takes the job's layout from here

  // Checkpoints and events: the chief's alone; the others get its state.
  std::optional<io::CheckpointManager> mgr;
  std::optional<io::EventWriter> events;
  bool restored = false;
  if (st.chief()) {
    fs::create_directories(f.job_dir);
    mgr.emplace(f.job_dir, std::size_t(f.keep_checkpoints));
    for (const auto& w : mgr->warnings()) std::cout << "WARNING: " << w << "\n";
    restored = trainer.restore_latest(*mgr, &std::cout);
  }
  st.share_state(trainer, pipe, f.seed);
  if (restored && trainer.global_step() >= train_steps)
    std::cout << "Already trained to step " << trainer.global_step() << " (--train-steps " << train_steps
              << "): evaluating only.\n";
  if (st.chief()) events.emplace(f.job_dir);
  auto eval = [&] { return evaluate(net, f, data, fmt, *events, trainer.global_step()); };
  auto add_hook = st.hooks(trainer, f.max_seconds);  // distributed: on the chief only
  if (st.chief()) add_chief_hooks(add_hook, f, *mgr, *events, eval);

  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t start_step = trainer.global_step();
  trainer.run(st.feed(pipe));
  if (!trainer.last_trace_path().empty()) std::cout << "Last trace: " << trainer.last_trace_path() << "\n";
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  st.end_training(trainer, std::cerr);
  if (!st.chief()) return 0;  // the chief reports and evaluates
  const bool trained = trainer.global_step() > start_step;
  if (trained)
    std::printf("Trained steps %lld..%lld in %.1f s (%.1f examples/sec)\n",
                static_cast<long long>(start_step), static_cast<long long>(trainer.global_step()), secs,
                double(trainer.global_step() - start_step) * f.train_batch_size / secs);
  std::printf("%s", st.allreduce_report(trained).c_str());
  const auto r = eval();
  std::printf("%saccuracy = %.4f, loss = %.4f, global_step = %lld (%zu/%zu correct)\n",
              data.synthetic ? "[synthetic data] " : "", r.precision(), r.loss,
              static_cast<long long>(trainer.global_step()), r.correct, r.total);
  st.finish();
  return 0;
}

/// Defined in cuda.cpp (its own translation unit), in a build with the CUDA backend.
int run_cuda(const Flags& f, recipes::Strategy& st, const train::GpuPlacement& gpus);
/// --num-gpus N > 1: one tower per GPU in this process (cuda_towers.cpp).
int run_cuda_towers(const Flags& f, recipes::Strategy& st, const train::GpuPlacement& gpus);

}  // namespace resnet_cifar10
