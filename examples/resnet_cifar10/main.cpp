// examples/resnet_cifar10 — TensorFlow's official CIFAR-10 ResNet estimator
// (cifar10_main.py + cifar10_model.py + model_base.py), ported to cifarnet.
//
// ResNet v1 with 6n+2 layers, momentum SGD with TF semantics, the piecewise
// learning rate (boundaries at epochs 82/123/300), batch norm 0.997/1e-5,
// L2 weight decay over every trainable variable, pad-crop-flip augmentation.
// Same flags, defaults and validation errors as the seed (SPEC §3), plus a few
// that users expect (--eval-every, --seed, --epochs, --schedule, ...).
//
// It trains for --train-steps, logging examples/sec every 10 steps and loss
// and learning rate every 100, writes checkpoints and TensorBoard events into
// --job-dir, resumes from the latest checkpoint there, and evaluates on the
// test batch at the end, printing "accuracy = ...".
//
//   resnet_cifar10 --data-dir ../shared/data/cifar-10-batches-bin --job-dir runs/r20
//                  --num-gpus 0 --num-layers 20 --train-steps 9360
//   resnet_cifar10 --job-dir runs/demo --num-gpus 0 --num-layers 8 --train-steps 200   # synthetic data
//
// Under `mpirun -np N` (a build with MPI) it trains synchronously data-parallel,
// the seed's --sync mode: each process takes a disjoint 1/N of every global
// batch of --train-batch-size, gradients are averaged over the processes
// (distributed/data_parallel.hpp), and rank 0 alone logs, writes events and
// checkpoints and evaluates; a restart resumes on every rank from rank 0's
// latest checkpoint. --sync-batch-norm normalizes with the global batch's
// statistics. Started without mpirun, it runs exactly as a single process.
//   mpirun -np 2 resnet_cifar10 --job-dir runs/r20x2 --num-gpus 0 --num-layers 20 --sync
#include <CLI/CLI.hpp>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/data/recipes.hpp>
#include <cifarnet/data/synthetic.hpp>
#include <cifarnet/io/checkpoint.hpp>
#include <cifarnet/io/tfevents.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/train/hooks.hpp>
#include <cifarnet/train/trainer.hpp>
#ifdef CIFARNET_WITH_MPI
#include <cifarnet/distributed/data_parallel.hpp>
#endif

namespace fs = std::filesystem;
using namespace cifarnet;

namespace {

const char* kHowToGetData =
    "CIFAR-10 (binary version) is expected in a directory holding data_batch_1.bin ... data_batch_5.bin,\n"
    "test_batch.bin and batches.meta.txt (10,000 records of 3,073 bytes each: a label byte, then 1,024 red,\n"
    "1,024 green and 1,024 blue bytes). Get it from https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz\n"
    "and unpack it: tar xzf cifar-10-binary.tar.gz  ->  cifar-10-batches-bin/\n";

struct Flags {
  std::string data_dir, job_dir, variable_strategy = "CPU", data_format, schedule = "seed",
                                 train_split = "train";
  int num_gpus = 1, num_layers = 44, num_intra_threads = 0, num_inter_threads = 0;
  std::int64_t train_steps = 80000, eval_every = 0, save_checkpoints_steps = 0;
  int train_batch_size = 128, eval_batch_size = 100, keep_checkpoints = 5, synthetic_examples = 2560;
  double momentum = 0.9, weight_decay = 2e-4, learning_rate = 0.1, batch_norm_decay = 0.997,
         batch_norm_epsilon = 1e-5, epochs = 0, max_seconds = 0, save_checkpoints_secs = 600;
  bool use_distortion = true, sync = false, log_device_placement = false, sync_batch_norm = false;
  double collective_timeout = 600;
  std::uint64_t seed = 0;
};

/// The processes of this run: one, or the ranks of an MPI job.
struct Cluster {
  int rank = 0, size = 1;
#ifdef CIFARNET_WITH_MPI
  std::unique_ptr<distributed::Communicator> comm;  // set under mpirun
#endif
  bool chief() const { return rank == 0; }
};

/// The seed's validations (cifar10_main.py), with its messages.
void validate(const Flags& f, const Cluster& cl) {
  if (f.num_gpus < 0) throw ConfigError("Invalid GPU count: \"--num-gpus\" must be 0 or a positive integer.");
  if (f.num_gpus == 0 && f.variable_strategy == "GPU")
    throw ConfigError("num-gpus=0, CPU must be used as parameter server. Set --variable-strategy=CPU.");
  if ((f.num_layers - 2) % 6 != 0 || f.num_layers < 8) throw ConfigError("Invalid --num-layers parameter.");
  if (f.num_gpus != 0 && f.train_batch_size % f.num_gpus != 0)
    throw ConfigError("--train-batch-size must be multiple of --num-gpus.");
  if (f.num_gpus != 0 && f.eval_batch_size % f.num_gpus != 0)
    throw ConfigError("--eval-batch-size must be multiple of --num-gpus.");
  if (cl.size > 1 && f.train_batch_size % cl.size != 0)  // the towers' check, one tower per process
    throw ConfigError(
        "--train-batch-size must be multiple of the number of MPI processes (--train-batch-size " +
        std::to_string(f.train_batch_size) + ", mpirun -np " + std::to_string(cl.size) + ").");
  if (!(f.collective_timeout > 0)) throw ConfigError("--collective-timeout must be positive.");
  if (f.num_gpus > 0)
    throw ConfigError("--num-gpus " + std::to_string(f.num_gpus) +
                      ": GPUs were requested but none is available to this build (no CUDA device present). "
                      "Use --num-gpus 0 to train on the CPU.");
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
  if (f.sync && f.num_gpus <= 1 && cl.size == 1)
    std::cerr
        << "note: --sync has no effect in a single process (synchronous training is the only mode here)\n";
  if (f.sync_batch_norm && cl.size == 1)
    std::cerr << "note: --sync-batch-norm has no effect in a single process\n";
  if (!f.sync && cl.size > 1 && cl.chief())
    std::cerr << "note: " << cl.size
              << " MPI processes train synchronously (--sync); asynchronous parameter-server training is "
                 "not implemented\n";
}

/// The training split's source: real CIFAR-10 or the built-in synthetic set.
struct DataSet {
  std::shared_ptr<const data::ImageSetSource> train, eval;
  bool synthetic = false;
};

DataSet load_data(const Flags& f) {
  DataSet d;
  if (f.data_dir.empty()) {
    std::cout << "No --data-dir given.\n"
              << kHowToGetData << "Running on a small BUILT-IN SYNTHETIC data set instead ("
              << f.synthetic_examples
              << " training and 500 test images of 10 made-up classes): accuracy on it says nothing about "
                 "CIFAR-10.\n";
    d.train =
        std::make_shared<data::ImageSetSource>(data::synthetic_cifar(std::size_t(f.synthetic_examples), 1));
    d.eval = std::make_shared<data::ImageSetSource>(data::synthetic_cifar(500, 2));
    d.synthetic = true;
    return d;
  }
  if (!fs::is_directory(f.data_dir))
    throw IoError("--data-dir '" + f.data_dir + "' is not a directory.\n" + kHowToGetData);
  const data::Split split = data::parse_split(f.train_split);
  d.train = std::make_shared<data::Cifar10Binary>(f.data_dir, split);
  d.eval = std::make_shared<data::Cifar10Binary>(f.data_dir, data::Split::eval);
  return d;
}

/// Times a training step of the real model (batch 32) in each format, after
/// one warm-up step that builds the primitives; the faster format wins.
template <class Net>
DataFormat measure_data_format(const NetOptions& opts) {
  const std::size_t batch = 32;
  double best = 1e300;
  DataFormat pick = DataFormat::NHWC;
  std::string report;
  for (DataFormat fmt : {DataFormat::NHWC, DataFormat::NCHW}) {
    Model<Net, backend::OneDnn> net({3, 32, 32}, fmt, opts, 0);
    Tensor<float> x = make_tensor<float>({batch, 3, 32, 32}, fmt);
    Rng rng(3);
    for (auto& v : x) v = float(rng.uniform(0, 255));
    std::vector<std::int32_t> y(batch, 1);
    Tensor<float> d;
    double t = 1e300;
    for (int i = 0; i < 2; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      softmax_cross_entropy(net.forward(x, Mode::Train), y, &d);
      net.backward(d);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) t = std::min(t, s);  // the first step builds the primitives
    }
    report += std::string(report.empty() ? "" : ", ") + to_string(fmt) + " " +
              std::to_string(t).substr(0, 5) + " s";
    if (t < best) {
      best = t;
      pick = fmt;
    }
  }
  std::cout << "--data-format not given: measured a training step of batch 32 (" << report << "); using "
            << (pick == DataFormat::NHWC ? "channels_last" : "channels_first") << "\n";
  return pick;
}

int run(const Flags& f, Cluster& cl) {
  if (f.num_intra_threads > 0) {
    omp_set_num_threads(f.num_intra_threads);
  } else if (cl.size > 1) {  // auto: the node's cores shared by the processes on it
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int per_node = local ? std::max(1, std::atoi(local)) : cl.size;
    omp_set_num_threads(std::max(1, omp_get_num_procs() / per_node));
  }
  if (f.log_device_placement)
    std::cout << "device: CPU, oneDNN " << dnnl_version()->major << "." << dnnl_version()->minor << "."
              << dnnl_version()->patch << ", " << omp_get_max_threads() << " OpenMP threads\n";

  DataSet data = load_data(f);
  const std::size_t n_train = data.train->size(), n_eval = data.eval->size();
  if (n_eval % std::size_t(f.eval_batch_size) != 0)
    throw ConfigError("validation set size must be multiple of eval_batch_size (" + std::to_string(n_eval) +
                      " eval examples, --eval-batch-size " + std::to_string(f.eval_batch_size) + ")");

  // Steps, and the learning-rate schedule in steps.
  const double steps_per_epoch = double(n_train) / double(f.train_batch_size);
  const std::int64_t train_steps =
      f.epochs > 0 ? std::int64_t(f.epochs * double(n_train / std::size_t(f.train_batch_size)))
                   : f.train_steps;
  const double lr = f.learning_rate;
  std::function<double(std::int64_t)> schedule;
  std::string schedule_text;
  if (f.schedule == "seed") {
    std::vector<std::int64_t> b;
    if (f.epochs > 0) {
      // The seed's boundaries as fractions of its 80k-step run (its epoch was
      // 45,000/128 = 351 steps), scaled to this run, as the PyTorch peer does.
      for (double e : {82.0, 123.0, 300.0})
        b.push_back(std::int64_t(double(train_steps) * e * 351.0 / 80000.0));
    } else {
      for (double e : {82.0, 123.0, 300.0}) b.push_back(std::int64_t(steps_per_epoch * e));
    }
    auto pc = optim::piecewise_constant(b, {lr, lr * 0.1, lr * 0.01, lr * 0.002});
    schedule = pc;
    schedule_text = "piecewise constant, boundaries " + std::to_string(b[0]) + "/" + std::to_string(b[1]) +
                    "/" + std::to_string(b[2]) + " steps";
  } else if (f.schedule == "step") {
    auto pc = optim::piecewise_constant({train_steps / 2, train_steps * 3 / 4}, {lr, lr * 0.1, lr * 0.01});
    schedule = pc;
    schedule_text = "x0.1 at 50% and 75% of the run";
  } else if (f.schedule == "cosine") {
    auto cd = optim::cosine_decay(lr, std::max<std::int64_t>(1, train_steps));
    schedule = cd;
    schedule_text = "cosine decay to 0";
  } else {
    throw ConfigError("--schedule '" + f.schedule + "': expected seed, step or cosine");
  }

  // Model, optimizer, data pipeline.
  const NetOptions opts = resnet_options(f.num_layers, f.batch_norm_decay, f.batch_norm_epsilon);
  DataFormat fmt = DataFormat::NHWC;
  if (!f.data_format.empty())
    fmt = parse_data_format(f.data_format);
  else if (cl.chief())
    fmt = measure_data_format<ResNetCifar<>>(opts);
#ifdef CIFARNET_WITH_MPI
  if (cl.comm && f.data_format.empty()) {  // every rank takes the chief's measured choice
    int code = int(fmt);
    cl.comm->broadcast(&code, 1, 0, "data format broadcast");
    fmt = DataFormat(code);
  }
#endif
  using Net = Model<ResNetCifar<>, backend::OneDnn>;
  Net net({3, 32, 32}, fmt, opts, f.seed);
  optim::Momentum<float> opt(net.parameters(), optim::MomentumOptions().momentum(f.momentum));
#ifdef CIFARNET_WITH_MPI
  // Distributed: gradients averaged over the processes before the momentum
  // step (same checkpoint slots as the single-process optimizer).
  using DistOpt = optim::Chain<distributed::AllReduceMean, optim::Momentum>;
  std::unique_ptr<DistOpt> dist_opt;
  std::unique_ptr<distributed::SyncBatchNorm> sync_bn;
  if (cl.comm) {
    dist_opt = std::make_unique<DistOpt>(net.parameters(), distributed::AllReduceOptions(*cl.comm),
                                         optim::MomentumOptions().momentum(f.momentum));
    if (f.sync_batch_norm) {
      sync_bn = std::make_unique<distributed::SyncBatchNorm>(*cl.comm);
      net.set_cross_replica(sync_bn.get());
    }
  }
#endif

  data::PipelineOptions po = data::recipes::resnet_train_options(f.seed, std::size_t(f.train_batch_size));
  po.format = fmt;
  po.num_workers = f.num_inter_threads > 0 ? std::size_t(f.num_inter_threads) : 1;
  using TrainPipe = data::Pipeline<data::ImageSetSource, data::PadCrop<4>, data::RandomFlipLR>;
  using PlainPipe = data::Pipeline<data::ImageSetSource>;
  std::unique_ptr<TrainPipe> distorted;
  std::unique_ptr<PlainPipe> plain;
  if (f.use_distortion)
    distorted = std::make_unique<TrainPipe>(data.train, po);
  else
    plain = std::make_unique<PlainPipe>(data.train, po);
  auto position = [&] { return distorted ? distorted->position() : plain->position(); };
  auto restore_position = [&](const data::PipelinePosition& p) {
    if (distorted)
      distorted->restore(p);
    else
      plain->restore(p);
  };

  std::cout << "ResNet-" << f.num_layers << " (" << net.parameters().num_trainable() << " parameters), "
            << (data.synthetic ? "SYNTHETIC data" : "CIFAR-10 split '" + f.train_split + "'") << " ("
            << n_train << " training examples, " << n_eval << " eval), batch " << f.train_batch_size << ", "
            << train_steps << " steps (" << double(train_steps) / steps_per_epoch << " epochs), lr " << lr
            << " " << schedule_text << ", format "
            << (fmt == DataFormat::NHWC ? "channels_last" : "channels_first")
            << (cl.size > 1 ? ", " + std::to_string(cl.size) + " MPI processes of batch " +
                                  std::to_string(f.train_batch_size / cl.size) +
                                  (f.sync_batch_norm ? " (synchronized batch norm)" : "")
                            : std::string())
            << "\n";

  // Distributed, the chief decides when to stop (max_seconds), for every rank.
  train::Trainer<Net> trainer(net, {train_steps, f.weight_decay, true, cl.size > 1 ? 0.0 : f.max_seconds});
#ifdef CIFARNET_WITH_MPI
  if (dist_opt)
    trainer.set_optimizer(*dist_opt, schedule);
  else
#endif
    trainer.set_optimizer(opt, schedule);
  trainer.add_state(std::make_shared<train::FunctionSaveable>(
      [&](io::StateDict& d) { d.metadata["pipeline/train"] = position().to_string(); },
      [&](const io::StateDict& d) {
        auto it = d.metadata.find("pipeline/train");
        if (it == d.metadata.end())
          throw DataError("checkpoint " + io::detail::source_of(d) + " has no 'pipeline/train' position");
        restore_position(data::PipelinePosition::parse(it->second));
      }));

  // Checkpoints and events: the chief's alone; the others get its state.
  std::optional<io::CheckpointManager> mgr;
  std::optional<io::EventWriter> events;
  bool restored = false;
  if (cl.chief()) {
    fs::create_directories(f.job_dir);
    mgr.emplace(f.job_dir, std::size_t(f.keep_checkpoints));
    for (const auto& w : mgr->warnings()) std::cout << "WARNING: " << w << "\n";
    restored = trainer.restore_latest(*mgr, &std::cout);
  }
#ifdef CIFARNET_WITH_MPI
  if (cl.comm) distributed::broadcast_training_state(*cl.comm, trainer);  // parameters, slots, step, data
#endif
  if (restored && trainer.global_step() >= train_steps)
    std::cout << "Already trained to step " << trainer.global_step() << " (--train-steps " << train_steps
              << "): evaluating only.\n";
  if (cl.chief()) events.emplace(f.job_dir);

  // Evaluation on the eval split (moving BN statistics), as the estimator's evaluate().
  data::PipelineOptions eo = data::recipes::resnet_eval_options(std::size_t(f.eval_batch_size));
  eo.format = fmt;
  eo.num_workers = 0;
  auto evaluate = [&]() {
    PlainPipe eval_pipe(data.eval, eo);
    data::Batch b;
    train::Batch tb;
    auto next = [&]() -> const train::Batch& {
      if (!eval_pipe.next(b)) b.labels.clear();
      std::swap(tb.images, b.images);
      std::swap(tb.labels, b.labels);
      return tb;
    };
    const auto r = train::evaluate(net, next);
    events->add_scalar("accuracy", r.precision(), trainer.global_step());
    events->add_scalar("eval/loss", r.loss, trainer.global_step());
    events->flush();
    return r;
  };

  // Hooks: distributed, they run on the chief only, behind ChiefHooks (which
  // averages the loss over the ranks and shares the chief's stop decision).
  std::function<void(std::shared_ptr<train::Hook>)> add_hook = [&](std::shared_ptr<train::Hook> h) {
    trainer.add_hook(std::move(h));
  };
#ifdef CIFARNET_WITH_MPI
  if (cl.comm) {
    auto chief_hooks = std::make_shared<distributed::ChiefHooks>(*cl.comm, f.max_seconds);
    trainer.add_hook(chief_hooks);
    add_hook = [chief_hooks](std::shared_ptr<train::Hook> h) { chief_hooks->add(std::move(h)); };
  }
#endif
  if (cl.chief()) {
    auto eps = std::make_shared<train::ExamplesPerSecondHook>(10);
    add_hook(eps);
    add_hook(std::make_shared<train::LoggingHook>(100));
    add_hook(std::make_shared<train::SummaryHook>(*events, 100));
    add_hook(
        std::make_shared<train::CheckpointHook>(*mgr, f.save_checkpoints_steps, f.save_checkpoints_secs));
    add_hook(std::make_shared<train::ProgressBarHook>());
    if (f.eval_every > 0)
      add_hook(std::make_shared<train::LambdaHook>([&](train::TrainerBase&, const train::StepResult& r) {
        if (r.step % f.eval_every != 0) return;
        const auto e = evaluate();
        std::printf("step = %lld, eval accuracy = %.4f, eval loss = %.4f\n", static_cast<long long>(r.step),
                    e.precision(), e.loss);
        std::fflush(stdout);
      }));
  }

  // Every rank reads the same global batches (same seed and position) and
  // trains on its own slice of each.
  data::Batch batch;
  train::Batch tb, shard;
  auto next = [&]() -> const train::Batch& {
    const bool ok = distorted ? distorted->next(batch) : plain->next(batch);
    if (!ok) throw Error("the training pipeline ended (it repeats forever; this is a bug)");
    std::swap(tb.images, batch.images);
    std::swap(tb.labels, batch.labels);
#ifdef CIFARNET_WITH_MPI
    if (cl.comm) {
      distributed::take_shard(tb, cl.rank, cl.size, shard);
      return shard;
    }
#endif
    return tb;
  };
  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t start_step = trainer.global_step();
  trainer.run(next);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!cl.chief()) return 0;  // the chief reports and evaluates
  if (trainer.global_step() > start_step)
    std::printf("Trained steps %lld..%lld in %.1f s (%.1f examples/sec)\n",
                static_cast<long long>(start_step), static_cast<long long>(trainer.global_step()), secs,
                double(trainer.global_step() - start_step) * f.train_batch_size / secs);

  const auto r = evaluate();
  std::printf("%saccuracy = %.4f, loss = %.4f, global_step = %lld (%zu/%zu correct)\n",
              data.synthetic ? "[synthetic data] " : "", r.precision(), r.loss,
              static_cast<long long>(trainer.global_step()), r.correct, r.total);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"ResNet v1 on CIFAR-10, ported from TensorFlow's cifar10_estimator (see SPEC §3)"};
  app.add_option("--data-dir", f.data_dir,
                 "The directory where the CIFAR-10 binary data is stored (cifar-10-batches-bin). "
                 "Without it, a small built-in synthetic set is used.");
  app.add_option("--job-dir", f.job_dir,
                 "The directory where the model (checkpoints, events) will be stored.")
      ->required();
  app.add_option("--variable-strategy", f.variable_strategy, "Where to locate variable operations")
      ->check(CLI::IsMember({"CPU", "GPU"}))
      ->capture_default_str();
  app.add_option("--num-gpus", f.num_gpus, "The number of gpus used. Uses only CPU if set to 0.")
      ->capture_default_str();
  app.add_option("--num-layers", f.num_layers, "The number of layers of the model (6n + 2).")
      ->capture_default_str();
  app.add_option("--train-steps", f.train_steps, "The number of steps to use for training.")
      ->capture_default_str();
  app.add_option("--train-batch-size", f.train_batch_size, "Batch size for training.")->capture_default_str();
  app.add_option("--eval-batch-size", f.eval_batch_size, "Batch size for validation.")->capture_default_str();
  app.add_option("--momentum", f.momentum, "Momentum for MomentumOptimizer.")->capture_default_str();
  app.add_option("--weight-decay", f.weight_decay, "Weight decay for convolutions.")->capture_default_str();
  app.add_option("--learning-rate", f.learning_rate,
                 "This is the inital learning rate value. The learning rate will decrease during training.")
      ->capture_default_str();
  app.add_option("--use-distortion-for-training", f.use_distortion, "If doing image distortion for training.")
      ->capture_default_str();
  app.add_flag("--sync", f.sync,
               "If present when running in a distributed environment will run on sync mode.");
  app.add_option("--num-intra-threads", f.num_intra_threads,
                 "Number of threads for the compute kernels (OpenMP); 0 = one per core.")
      ->capture_default_str();
  app.add_option("--num-inter-threads", f.num_inter_threads,
                 "Number of input-pipeline worker threads; 0 = one.")
      ->capture_default_str();
  app.add_option("--data-format", f.data_format,
                 "channels_first (NCHW) or channels_last (NHWC). Default: the faster one on this machine, "
                 "measured at start-up.")
      ->check(CLI::IsMember({"channels_first", "channels_last"}));
  app.add_flag("--log-device-placement", f.log_device_placement, "Whether to log device placement.");
  app.add_option("--batch-norm-decay", f.batch_norm_decay, "Decay for batch norm.")->capture_default_str();
  app.add_option("--batch-norm-epsilon", f.batch_norm_epsilon, "Epsilon for batch norm.")
      ->capture_default_str();
  // Beyond the seed.
  app.add_option("--epochs", f.epochs,
                 "Train for this many epochs instead of --train-steps; the seed schedule's boundaries scale "
                 "with the run.");
  app.add_option("--schedule", f.schedule,
                 "Learning-rate schedule: seed (piecewise at epochs 82/123/300), step (x0.1 at 50% and 75%), "
                 "cosine.")
      ->check(CLI::IsMember({"seed", "step", "cosine"}))
      ->capture_default_str();
  app.add_option("--train-split", f.train_split, "train (batches 1-4) or train_all (batches 1-5).")
      ->check(CLI::IsMember({"train", "train_all"}))
      ->capture_default_str();
  app.add_option("--eval-every", f.eval_every, "Also evaluate every N steps (0: only at the end).");
  app.add_option("--save-checkpoints-steps", f.save_checkpoints_steps, "Checkpoint every N steps (0: off).");
  app.add_option("--save-checkpoints-secs", f.save_checkpoints_secs, "Checkpoint every N seconds (0: off).")
      ->capture_default_str();
  app.add_option("--keep-checkpoints", f.keep_checkpoints, "How many checkpoints to keep.")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "Seed of initialization, shuffling and augmentation.")
      ->capture_default_str();
  app.add_option("--max-seconds", f.max_seconds, "Stop (with a checkpoint) after this much training time.");
  app.add_option("--synthetic-examples", f.synthetic_examples, "Size of the built-in synthetic training set.")
      ->capture_default_str();
  // Distributed training (under mpirun).
  app.add_flag("--sync-batch-norm", f.sync_batch_norm,
               "Under mpirun: batch norm uses the statistics of the global batch over all processes "
               "(default: each process its own slice's, as the seed's towers).");
  app.add_option("--collective-timeout", f.collective_timeout,
                 "Under mpirun: seconds a process waits for the others in a collective before it ends the "
                 "job with an error (a dead or hung process).")
      ->capture_default_str();
#ifdef CIFARNET_WITH_MPI
  // Under mpirun, MPI starts first (it may take arguments of its own).
  std::optional<distributed::Environment> mpi;
  if (distributed::launched_by_mpi()) mpi.emplace(&argc, &argv);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  Cluster cl;
  // An error: rank 0 (or the rank that met it, when not a flag error) says
  // why; distributed, the whole job then ends (the others would wait for this
  // process until --collective-timeout).
  auto fail = [&](const std::exception& e, int code) {
    if (cl.chief() || code != 2)
      std::cerr << "resnet_cifar10: " << (cl.size > 1 ? "rank " + std::to_string(cl.rank) + ": " : "")
                << e.what() << "\n"
                << std::flush;
#ifdef CIFARNET_WITH_MPI
    if (cl.size > 1) distributed::Environment::abort_all(code);
#endif
    return code;
  };
  try {
#ifdef CIFARNET_WITH_MPI
    if (mpi) {
      cl.comm = std::make_unique<distributed::Communicator>(MPI_COMM_WORLD, f.collective_timeout);
      cl.rank = cl.comm->rank();
      cl.size = cl.comm->size();
    }
#endif
    if (!cl.chief()) std::cout.rdbuf(nullptr);  // only rank 0 prints
    validate(f, cl);
  } catch (const ConfigError& e) {  // the same on every rank: each exits cleanly
    if (cl.chief()) std::cerr << "resnet_cifar10: " << e.what() << "\n";
    return 2;
  }
  try {
    return run(f, cl);
  } catch (const ConfigError& e) {
    return fail(e, 2);
  } catch (const Error& e) {
    return fail(e, 1);
  } catch (const std::exception& e) {
    return fail(e, 1);
  }
}
