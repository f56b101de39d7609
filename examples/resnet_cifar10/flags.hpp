// examples/resnet_cifar10/flags.hpp — the program's flags, their validation
// (the seed's messages), the devices and processes they ask for, and the
// run they start (run.cpp) on the network of a backend (network.hpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include <cifarnet/core/error.hpp>
#include <cifarnet/recipes/devices.hpp>
#include <cifarnet/recipes/strategy.hpp>
#include <cifarnet/train/placement.hpp>

#include "../common/cifar10_download.hpp"
#include "../common/cifar10_help.hpp"
#include "network.hpp"

namespace resnet_cifar10 {

using namespace cifarnet;

/// Where the data must be and how to get them (--data-dir errors, the synthetic fallback).
inline std::string how_to_get_data() {
  return examples::how_to_get_cifar10("--data-dir", /*tfrecords=*/true);
}

/// The seed's Cifar10DataSet.num_examples_per_epoch('train'), from which it
/// computes the learning-rate boundaries (train.hpp, schedule_steps_per_epoch).
inline constexpr std::int64_t kSeedExamplesPerEpoch = 45000;

struct Flags {
  std::string data_dir, job_dir, variable_strategy = "CPU", data_format, schedule = "seed",
                                 train_split = "train", precision = "fp32", input_format = "auto",
                                 conv_algorithm = "auto";
  examples::DownloadFlags download;
  int num_gpus = 1, num_layers = 44, num_intra_threads = 0, num_inter_threads = 0;
  std::int64_t train_steps = 80000, eval_every = 0, save_checkpoints_steps = 0;
  int train_batch_size = 128, eval_batch_size = 100, keep_checkpoints = 5, synthetic_examples = 2560;
  double momentum = 0.9, weight_decay = 2e-4, learning_rate = 0.1, batch_norm_decay = 0.997,
         batch_norm_epsilon = 1e-5, epochs = 0, max_seconds = 0, save_checkpoints_secs = 600,
         save_summaries_secs = 0;
  std::int64_t trace_every_n_steps = 0;
  std::int64_t startup_delay_steps = 0;  // TF-Slim's: non-chief workers start at global step N (async)
  std::int64_t log_every_n_steps = 0;    // TF-Slim's log line every N steps (0: off)
  bool schedule_from_counted_examples = false;
  bool use_distortion = true, sync = false, log_device_placement = false, sync_batch_norm = false;
  bool overlap_allreduce = true, soft_placement = true;
  bool deterministic = false, allow_tf32 = false;  // cuDNN convolution options (CUDA backend)
  bool explain_plan = false;                       // print the step plans (run.cpp, explain) and exit
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
  if (f.conv_algorithm != "auto" && f.conv_algorithm != "winograd")
    throw ConfigError("--conv-algorithm '" + f.conv_algorithm + "': expected auto or winograd.");
  if (f.conv_algorithm == "winograd" && f.precision == "bf16")
    throw ConfigError(
        "--conv-algorithm winograd with --precision bf16: bf16 convolutions are direct; use --precision fp32 "
        "for Winograd.");
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
  if (f.log_every_n_steps < 0) throw ConfigError("--log-every-n-steps must be >= 0.");
  examples::validate_download(f.download, f.data_dir);
  if (f.sync && f.num_gpus <= 1 && st.size() == 1)
    std::cerr
        << "note: --sync has no effect in a single process (synchronous training is the only mode here)\n";
  if (f.sync_batch_norm && st.size() == 1)
    std::cerr << "note: --sync-batch-norm has no effect in a single process\n";
  if (st.async() && f.sync_batch_norm)
    throw ConfigError(
        "--sync-batch-norm needs --sync: asynchronous workers do not take their steps together.");
  if (f.explain_plan && f.sync_batch_norm && st.size() > 1)
    throw ConfigError(
        "--explain-plan does not explain synchronized batch norm's step under mpirun (its statistics "
        "are reduced over the processes while the step runs); drop --sync-batch-norm to see each "
        "replica's plan without it.");
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
  if (f.conv_algorithm == "winograd" && f.num_gpus > 0)
    throw ConfigError(
        "--conv-algorithm winograd: a CPU (oneDNN) option (cuDNN picks its own algorithms); use --num-gpus "
        "0, "
        "or --conv-algorithm auto on the GPU.");
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

/// The network's spec from the flags (layout `fmt`).
inline NetworkSpec network_spec(const Flags& f, DataFormat fmt) {
  NetworkSpec n;
  n.num_layers = f.num_layers;
  n.bn_decay = f.batch_norm_decay;
  n.bn_epsilon = f.batch_norm_epsilon;
  n.bf16 = f.precision == "bf16";
  n.winograd = f.conv_algorithm == "winograd";
  n.format = fmt;
  n.seed = f.seed;
  n.num_gpus = f.num_gpus;
  n.variable_strategy = f.variable_strategy;
  n.deterministic = f.deterministic;
  n.allow_tf32 = f.allow_tf32;
  return n;
}

/// The whole run (run.cpp) on the network of `backend` (network.hpp).
int run(const Flags& f, recipes::Strategy& st, const train::GpuPlacement& gpus, NetworkBackend backend);

/// --explain-plan (run.cpp): the layout as run() chooses it, then the step
/// plans of one model of the run (one tower, one replica: the batch it
/// trains and evaluates on), from the chief; reads no data, trains nothing.
int explain(const Flags& f, recipes::Strategy& st, const train::GpuPlacement& gpus, NetworkBackend backend);

}  // namespace resnet_cifar10
