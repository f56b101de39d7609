// examples/resnet_cifar10/train.hpp — the program's flags, their validation and
// the training run, templated on the backend: main.cpp runs it on oneDNN
// (--num-gpus 0) and, in a build with the CUDA backend, cuda.cpp instantiates
// it for backend::Cuda (--num-gpus 1), each in its own translation unit so the
// two models compile in parallel.
#pragma once

#include <omp.h>

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
#include <cifarnet/train/hooks.hpp>
#include <cifarnet/train/placement.hpp>
#include <cifarnet/train/trainer.hpp>
#ifdef CIFARNET_WITH_MPI
#include <cifarnet/distributed/data_parallel.hpp>
#include <cifarnet/distributed/parameter_server.hpp>
#endif
#ifdef CIFARNET_WITH_CUDA
#include <cifarnet/backend/cuda/common.hpp>
#endif

#include "../common/cifar10_download.hpp"

namespace resnet_cifar10 {

namespace fs = std::filesystem;
using namespace cifarnet;

inline const char* kHowToGetData =
    "CIFAR-10 (binary version) is expected in a directory holding data_batch_1.bin ... data_batch_5.bin,\n"
    "test_batch.bin and batches.meta.txt (10,000 records of 3,073 bytes each: a label byte, then 1,024 red,\n"
    "1,024 green and 1,024 blue bytes), or holding that cifar-10-batches-bin/ directory, or holding\n"
    "train.tfrecords, validation.tfrecords and eval.tfrecords (cifar10_to_tfrecords). --download fetches\n"
    "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz into --data-dir and unpacks it there\n"
    "(or by hand: tar xzf cifar-10-binary.tar.gz  ->  cifar-10-batches-bin/).\n";

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

/// The processes of this run: one, or the ranks of an MPI job — all of them
/// synchronous replicas (--sync), or (num_ps > 0) parameter servers, the
/// first num_ps ranks, and asynchronous workers, the first of them the chief.
struct Cluster {
  int rank = 0, size = 1, num_ps = 0;
  train::GpuPlacement gpus;  ///< this process's devices (place_devices)
#ifdef CIFARNET_WITH_MPI
  std::unique_ptr<distributed::Communicator> comm;  // set under mpirun
#endif
  bool async() const { return num_ps > 0; }
  int chief_rank() const { return num_ps; }
  bool chief() const { return rank == chief_rank(); }
  bool parameter_server() const { return rank < num_ps; }
  int worker_index() const { return rank - num_ps; }
};

/// The seed's validations (cifar10_main.py), with its messages.
inline void validate(const Flags& f, const Cluster& cl) {
  if (f.num_gpus < 0) throw ConfigError("Invalid GPU count: \"--num-gpus\" must be 0 or a positive integer.");
  if (f.num_gpus == 0 && f.variable_strategy == "GPU")
    throw ConfigError("num-gpus=0, CPU must be used as parameter server. Set --variable-strategy=CPU.");
  if ((f.num_layers - 2) % 6 != 0 || f.num_layers < 8) throw ConfigError("Invalid --num-layers parameter.");
  if (f.num_gpus != 0 && f.train_batch_size % f.num_gpus != 0)
    throw ConfigError("--train-batch-size must be multiple of --num-gpus.");
  if (f.num_gpus != 0 && f.eval_batch_size % f.num_gpus != 0)
    throw ConfigError("--eval-batch-size must be multiple of --num-gpus.");
  if (cl.size > 1 && !cl.async() && f.train_batch_size % cl.size != 0)  // the towers' check, one per process
    throw ConfigError(
        "--train-batch-size must be multiple of the number of MPI processes (--train-batch-size " +
        std::to_string(f.train_batch_size) + ", mpirun -np " + std::to_string(cl.size) + ").");
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
  if (f.sync && f.num_gpus <= 1 && cl.size == 1)
    std::cerr
        << "note: --sync has no effect in a single process (synchronous training is the only mode here)\n";
  if (f.sync_batch_norm && cl.size == 1)
    std::cerr << "note: --sync-batch-norm has no effect in a single process\n";
  if (cl.async() && f.sync_batch_norm)
    throw ConfigError(
        "--sync-batch-norm needs --sync: asynchronous workers do not take their steps together.");
}

/// Soft placement (the seed's allow_soft_placement=True): with fewer GPUs
/// present than --num-gpus asks for, the ones present are used (the CPU when
/// none) and run() says so; --no-soft-placement makes it an error. Sets
/// f.num_gpus to the GPUs used. The checks that depend on the device follow.
inline train::GpuPlacement place_devices(Flags& f, const Cluster& cl) {
  int present = 0;
  std::string why;
  if (f.num_gpus > 0) {
#ifdef CIFARNET_WITH_CUDA
    present = backend::cuda::device_count();
    why = backend::cuda::no_device_reason();
#else
    why = "this build has no CUDA backend: the CUDA toolkit and cuDNN were not found, or -DCIFARNET_CUDA=OFF";
#endif
  }
  train::GpuPlacement p = train::place_on_gpus(f.num_gpus, present, why, f.soft_placement);
  f.num_gpus = p.used;
  if (f.num_gpus > 1 && cl.size > 1)
    throw ConfigError("--num-gpus " + std::to_string(f.num_gpus) +
                      " under mpirun: give each process one GPU (--num-gpus 1, one process per GPU); towers "
                      "over several GPUs are for a single process.");
  if (f.precision == "bf16" && f.num_gpus > 0)
    throw ConfigError(
        "--precision bf16: bf16 convolutions are a CPU (oneDNN) option; use --num-gpus 0, or "
        "--precision fp32 on the GPU.");
  return p;
}

/// --download: the chief fetches and unpacks CIFAR-10 into --data-dir when
/// it is not there yet; under mpirun every rank waits for it.
inline void fetch_data(const Flags& f, Cluster& cl) {
  if (!f.download.download) return;
  if (cl.chief()) examples::download_if_asked(f.download, f.data_dir, std::cout);
#ifdef CIFARNET_WITH_MPI
  if (cl.comm) cl.comm->barrier("waiting for the chief's --download");
#endif
}

/// The training split's source: real CIFAR-10 (binary or TFRecord files)
/// or the built-in synthetic set.
struct DataSet {
  std::shared_ptr<const data::Cifar10Source> train, eval;
  bool synthetic = false;
};

inline DataSet load_data(const Flags& f) {
  DataSet d;
  if (f.data_dir.empty()) {
    std::cout << "No --data-dir given.\n"
              << kHowToGetData << "Running on a small BUILT-IN SYNTHETIC data set instead ("
              << f.synthetic_examples
              << " training and 500 test images of 10 made-up classes): accuracy on it says nothing about "
                 "CIFAR-10.\n";
    d.train =
        std::make_shared<data::Cifar10Source>(data::synthetic_cifar(std::size_t(f.synthetic_examples), 1));
    d.eval = std::make_shared<data::Cifar10Source>(data::synthetic_cifar(500, 2));
    d.synthetic = true;
    return d;
  }
  if (!fs::is_directory(f.data_dir))
    throw IoError("--data-dir '" + f.data_dir + "' is not a directory.\n" + kHowToGetData);
  // Binary or TFRecord files, as the directory holds (or --input-format says).
  const data::Cifar10Format format = data::parse_cifar10_format(f.input_format);
  d.train = std::make_shared<data::Cifar10Source>(f.data_dir, data::parse_split(f.train_split), format);
  d.eval = std::make_shared<data::Cifar10Source>(f.data_dir, data::Split::eval, format);
  std::cout << "Reading " << d.train->description() << "; evaluating on " << d.eval->description() << "\n";
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
  const InputShape in{3, 32, 32};
  if constexpr (kTowers) {
    using Dev = Device<typename Net::Backend>;
    return std::make_unique<Net>(
        std::size_t(f.num_gpus), in, fmt, opts, f.seed,
        [](std::size_t i) { return std::make_unique<Dev>(int(i)); },
        make_tower_reducer(f.num_gpus, distributed::parse_variable_strategy(f.variable_strategy)));
  } else {
    return std::make_unique<Net>(in, fmt, opts, f.seed);
  }
}

inline NetOptions net_options(const Flags& f) {
  NetOptions opts = resnet_options(f.num_layers, f.batch_norm_decay, f.batch_norm_epsilon);
  if (f.precision == "bf16") opts.with_conv_precision(ConvPrecision::BF16);
  return opts;
}

#ifdef CIFARNET_WITH_MPI
/// A parameter server's whole run (asynchronous mode): the model's variables
/// (the same model as the workers'), its shard's momentum slots, serving the
/// workers until all have finished.
template <class B>
int serve_variables(const Flags& f, Cluster& cl, DataFormat fmt) {
  Model<ResNetCifar<>, B> net({3, 32, 32}, fmt, net_options(f), f.seed);
  const distributed::PsRoles roles(cl.size, cl.rank, cl.num_ps);
  distributed::ParameterServer<float> ps(*cl.comm, net.parameters(), roles);
  std::optional<optim::Momentum<float>> opt;
  if (auto sel = ps.selection())
    opt.emplace(net.parameters(), optim::MomentumOptions().momentum(f.momentum), *sel);
  io::StateDict initial;  // the chief's training state
  distributed::broadcast_state_dict(*cl.comm, initial, roles.chief_rank());
  const distributed::ServeStats st = ps.serve(opt ? &*opt : nullptr, initial);
  std::string per_worker;
  for (auto n : st.updates_per_worker) per_worker += (per_worker.empty() ? "" : ", ") + std::to_string(n);
  std::cerr << "parameter server (rank " << cl.rank << "): " << st.updates << " updates (" << per_worker
            << " by worker 0, 1, ...), staleness mean " << st.mean_staleness() << " max " << st.max_staleness
            << (st.global_step >= 0 ? ", global step " + std::to_string(st.global_step) : std::string())
            << "\n";
  return 0;
}
#endif

/// The whole run on backend B (backend::OneDnn, or backend::Cuda for
/// --num-gpus 1, or with kTowers one tower per GPU for --num-gpus N > 1).
template <class B, bool kTowers = false>
int run(const Flags& f, Cluster& cl) {
  // The layout, decided by the chief (given, recorded in the job's
  // checkpoint, or the default for the device) and said on the first line.
  train::FormatChoice layout;
  if (cl.chief()) {
    std::optional<DataFormat> given;
    if (!f.data_format.empty()) given = parse_data_format(f.data_format);
    layout = train::choose_data_format(given, f.num_gpus > 0, f.job_dir);
  }
#ifdef CIFARNET_WITH_MPI
  if (cl.comm) {  // every rank takes the chief's choice
    int code = int(layout.format);
    cl.comm->broadcast(&code, 1, cl.chief_rank(), "data format broadcast");
    layout.format = DataFormat(code);
  }
#endif
  const DataFormat fmt = layout.format;
  std::cout << layout.describe() << "\n";
  if (!cl.gpus.notice.empty()) std::cout << cl.gpus.notice << "\n";

  if (f.num_intra_threads > 0) {
    omp_set_num_threads(f.num_intra_threads);
  } else if (cl.size > 1) {  // auto: the node's cores shared by the processes on it
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int per_node = local ? std::max(1, std::atoi(local)) : cl.size;
    omp_set_num_threads(std::max(1, omp_get_num_procs() / per_node));
  }
#ifdef CIFARNET_WITH_MPI
  if constexpr (!kTowers)
    if (cl.parameter_server()) return serve_variables<B>(f, cl, fmt);
#endif
  if (f.log_device_placement) {
#ifdef CIFARNET_WITH_CUDA  // (the CUDA names exist only in a build with the CUDA backend)
    if constexpr (std::is_same_v<B, backend::Cuda>)
      std::cout << "device: GPU " << Device<backend::Cuda>().ordinal() << " (CUDA backend, cuDNN "
                << cudnnGetVersion() << ")\n";
    else
#endif
      std::cout << "device: CPU, oneDNN " << dnnl_version()->major << "." << dnnl_version()->minor << "."
                << dnnl_version()->patch << ", " << omp_get_max_threads() << " OpenMP threads\n";
  }

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
  const NetOptions opts = net_options(f);
  std::string precision_text = "fp32";
  if (f.precision == "bf16") {
    precision_text =
        backend::onednn::cpu_has_bf16_convolutions()
            ? "bf16 convolutions (fp32 weights, optimizer and other layers)"
            : "fp32 (--precision bf16 asked, but oneDNN has no bf16 kernels on this CPU: it needs "
              "AVX-512)";
  }
  using One = Model<ResNetCifar<>, B>;
  using Net = std::conditional_t<kTowers, distributed::Towers<One>, One>;
  const std::unique_ptr<Net> net_owner = make_net<Net, kTowers>(f, fmt, opts);
  Net& net = *net_owner;
#ifdef CIFARNET_WITH_CUDA
  if constexpr (std::is_same_v<B, backend::Cuda>) {  // before the first convolution picks its algorithms
    auto with_flags = [&](Device<backend::Cuda>& d) {
      backend::cuda::ConvOptions co = d.conv_options();  // CIFARNET_CUDA_TF32 / _DETERMINISTIC, or defaults
      co.deterministic = co.deterministic || f.deterministic;
      co.allow_tf32 = co.allow_tf32 || f.allow_tf32;
      d.set_conv_options(co);
    };
    if constexpr (kTowers)
      for (std::size_t i = 0; i < net.size(); ++i) with_flags(net.tower(i).device());
    else
      with_flags(net.device());
  }
#endif
  // The seed's L2 term over tf.trainable_variables() (every trainable
  // parameter), then momentum.
  const auto decay = optim::WeightDecayOptions(f.weight_decay);
  optim::Chain<optim::WeightDecay, optim::Momentum> opt(net.parameters(), decay,
                                                        optim::MomentumOptions().momentum(f.momentum));
#ifdef CIFARNET_WITH_MPI
  // Distributed: gradients averaged over the processes before the momentum
  // step (same checkpoint slots as the single-process optimizer).
  using DistOpt = optim::Chain<optim::WeightDecay, distributed::AllReduceMean, optim::Momentum>;
  // Overlapped (the default), the all-reduce runs during backward and the
  // plain optimizer follows it.
  std::unique_ptr<DistOpt> dist_opt;
  std::unique_ptr<distributed::OverlappedAllReduce<float>> overlap;
  std::unique_ptr<distributed::SyncBatchNorm> sync_bn;
  if (cl.comm && !cl.async()) {
    const auto ar =
        distributed::AllReduceOptions(*cl.comm).bucket_bytes(std::size_t(f.allreduce_bucket_kb) * 1024);
    if (f.overlap_allreduce)
      overlap = std::make_unique<distributed::OverlappedAllReduce<float>>(net.parameters(), ar);
    else
      dist_opt = std::make_unique<DistOpt>(net.parameters(), decay, ar,
                                           optim::MomentumOptions().momentum(f.momentum));
    if (f.sync_batch_norm) {
      sync_bn = std::make_unique<distributed::SyncBatchNorm>(*cl.comm);
      if constexpr (!kTowers) net.set_cross_replica(sync_bn.get());  // (towers: never under mpirun)
    }
  }
#endif

  data::PipelineOptions po = data::recipes::resnet_train_options(f.seed, std::size_t(f.train_batch_size));
  po.format = fmt;
  po.num_workers = f.num_inter_threads > 0 ? std::size_t(f.num_inter_threads) : 1;
  using TrainPipe = data::recipes::ResNetTrainT<data::Cifar10Source>;
  using PlainPipe = data::recipes::ResNetEvalT<data::Cifar10Source>;
  std::unique_ptr<TrainPipe> distorted;
  std::unique_ptr<PlainPipe> plain;
  auto make_pipeline = [&](std::uint64_t seed) {
    po.seed = seed;
    if (f.use_distortion)
      distorted = std::make_unique<TrainPipe>(data.train, po);
    else
      plain = std::make_unique<PlainPipe>(data.train, po);
  };
  make_pipeline(f.seed);
  auto position = [&] { return distorted ? distorted->position() : plain->position(); };
  auto restore_position = [&](const data::PipelinePosition& p) {
    if (distorted)
      distorted->restore(p);
    else
      plain->restore(p);
  };

  std::string towers_text;
  if constexpr (kTowers)
    towers_text = ", " + std::to_string(net.size()) + " towers (one per GPU) of batch " +
                  std::to_string(f.train_batch_size / f.num_gpus) + ", gradients summed by " +
                  net.reducer().name();
  std::cout << "ResNet-" << f.num_layers << " (" << net.parameters().num_trainable() << " parameters), "
            << (data.synthetic ? "SYNTHETIC data"
                               : "CIFAR-10 split '" + f.train_split + "' (" +
                                     (data.train->tfrecords() ? "TFRecord" : "binary") + " files)")
            << " (" << n_train << " training examples, " << n_eval << " eval), batch " << f.train_batch_size
            << ", " << train_steps << " steps (" << double(train_steps) / steps_per_epoch << " epochs), lr "
            << lr << " " << schedule_text << ", format " << layout_name(fmt) << ", " << precision_text
            << (cl.async() ? ", asynchronous: " + std::to_string(cl.num_ps) + " parameter server(s) and " +
                                 std::to_string(cl.size - cl.num_ps) + " workers of batch " +
                                 std::to_string(f.train_batch_size) + " each"
                : cl.size > 1 ? ", " + std::to_string(cl.size) + " MPI processes of batch " +
                                    std::to_string(f.train_batch_size / cl.size) +
                                    (f.sync_batch_norm ? " (synchronized batch norm)" : "") +
                                    (f.overlap_allreduce ? ", all-reduce overlapped with backward"
                                                         : ", all-reduce after backward")
                              : std::string())
            << towers_text << "\n";

  // Synchronous, the chief decides when to stop (max_seconds), for every rank.
  // TF-Slim's options: summaries at most every --save-summaries-secs, and
  // the chief's Chrome traces (<job-dir>/tf_trace-<step>.json); the chief is
  // worker 0 (rank num_ps when asynchronous).
  // --startup-delay-steps (asynchronous workers): worker k polls the
  // servers' global step (remote_step, set below) until it reaches k * N.
  auto remote_step = std::make_shared<std::function<std::int64_t()>>();
  train::Trainer<Net> trainer(net, train::TrainerOptions()
                                       .max_steps(train_steps)
                                       .max_seconds(cl.size > 1 && !cl.async() ? 0.0 : f.max_seconds)
                                       .save_summaries_secs(f.save_summaries_secs)
                                       .worker_index(cl.worker_index())
                                       .trace_every_n_steps(f.trace_every_n_steps)
                                       .trace_dir(f.job_dir)
                                       .startup_delay_steps(f.startup_delay_steps)
                                       .global_step_source([remote_step] {
                                         return *remote_step ? (*remote_step)() : std::int64_t(0);
                                       }));
#ifdef CIFARNET_WITH_MPI
  if (dist_opt)
    trainer.set_optimizer(*dist_opt, schedule);
  else
#endif
    trainer.set_optimizer(opt, schedule);
#ifdef CIFARNET_WITH_MPI
  if (overlap) trainer.set_gradient_sync(overlap.get());
#endif
  trainer.add_state(std::make_shared<train::FunctionSaveable>(
      [&](io::StateDict& d) { d.metadata["pipeline/train"] = position().to_string(); },
      [&](const io::StateDict& d) {
        auto it = d.metadata.find("pipeline/train");
        if (it == d.metadata.end())
          throw DataError("checkpoint " + io::detail::source_of(d) + " has no 'pipeline/train' position");
        restore_position(data::PipelinePosition::parse(it->second));
      }));
  trainer.add_state(train::data_format_saveable(fmt));  // a resume takes the job's layout from here

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
  // Asynchronous: the variables live on the parameter servers, which take
  // the chief's state; each other worker reads its own shuffle of the data,
  // seeded by its index and the step it starts at.
  std::unique_ptr<distributed::ParameterServerClient<float>> client;
  if (cl.async()) {
    const distributed::PsRoles roles(cl.size, cl.rank, cl.num_ps);
    client = std::make_unique<distributed::ParameterServerClient<float>>(*cl.comm, net.parameters(), roles);
    client->expect_slots(opt);
    io::StateDict d;
    if (cl.chief()) d = trainer.state_dict();
    distributed::broadcast_state_dict(*cl.comm, d, cl.chief_rank());
    if (!cl.chief())
      make_pipeline(
          Rng::stream(f.seed + 0x9E3779B97F4A7C15ull * std::uint64_t(io::global_step(d).value_or(0)),
                      std::uint64_t(cl.worker_index()))
              .next_u64());
    trainer.set_remote_variables(client.get());
    *remote_step = [&client] { return client->pull(); };
  } else if (cl.comm) {
    distributed::broadcast_training_state(*cl.comm, trainer);  // parameters, slots, step, data
  }
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
  if (cl.comm && !cl.async()) {
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

  // Synchronous, every rank reads the same global batches (same seed and
  // position) and trains on its own slice of each; asynchronous, each worker
  // trains on whole batches of its own.
  data::Batch batch;
  train::Batch tb, shard;
  auto next = [&]() -> const train::Batch& {
    const bool ok = distorted ? distorted->next(batch) : plain->next(batch);
    if (!ok) throw Error("the training pipeline ended (it repeats forever; this is a bug)");
    std::swap(tb.images, batch.images);
    std::swap(tb.labels, batch.labels);
#ifdef CIFARNET_WITH_MPI
    if (cl.comm && !cl.async()) {
      distributed::take_shard(tb, cl.rank, cl.size, shard);
      return shard;
    }
#endif
    return tb;
  };
  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t start_step = trainer.global_step();
  trainer.run(next);
  if (!trainer.last_trace_path().empty()) std::cout << "Last trace: " << trainer.last_trace_path() << "\n";
  if (trainer.startup_waited_for() > 0)
    std::cerr << "worker " << cl.worker_index() << " (rank " << cl.rank << ") started at global step "
              << trainer.startup_waited_for() << " (--startup-delay-steps)\n";
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#ifdef CIFARNET_WITH_MPI
  if (client) {
    const distributed::WorkerStats& ws = client->stats();
    std::ostringstream line;
    line << "worker " << cl.worker_index() << " (rank " << cl.rank << "): " << ws.updates << " updates, "
         << ws.stale_updates << " of them computed on stale variables (staleness mean " << ws.mean_staleness()
         << ", max " << ws.max_staleness << ")\n";
    std::cerr << line.str() << std::flush;
    if (cl.chief())
      client->pull();  // the servers' latest values, to evaluate
    else
      client->finish();
  }
#endif
  if (!cl.chief()) return 0;  // the chief reports and evaluates
  if (trainer.global_step() > start_step)
    std::printf("Trained steps %lld..%lld in %.1f s (%.1f examples/sec)\n",
                static_cast<long long>(start_step), static_cast<long long>(trainer.global_step()), secs,
                double(trainer.global_step() - start_step) * f.train_batch_size / secs);
#ifdef CIFARNET_WITH_MPI
  if (overlap && trainer.global_step() > start_step)
    std::printf(
        "Gradient all-reduce (last step): %zu of %zu buckets started during backward, %.2f ms "
        "waited after it\n",
        overlap->last_early_buckets(), overlap->buckets(), overlap->last_wait_seconds() * 1e3);
#endif

  const auto r = evaluate();
  std::printf("%saccuracy = %.4f, loss = %.4f, global_step = %lld (%zu/%zu correct)\n",
              data.synthetic ? "[synthetic data] " : "", r.precision(), r.loss,
              static_cast<long long>(trainer.global_step()), r.correct, r.total);
#ifdef CIFARNET_WITH_MPI
  if (client) client->finish();  // the servers stop once every worker has
#endif
  return 0;
}

#ifdef CIFARNET_WITH_CUDA
/// Defined in cuda.cpp (its own translation unit).
int run_cuda(const Flags& f, Cluster& cl);
/// --num-gpus N > 1: one tower per GPU in this process (cuda_towers.cpp).
int run_cuda_towers(const Flags& f, Cluster& cl);
#endif

}  // namespace resnet_cifar10
