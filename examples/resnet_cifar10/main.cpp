// examples/resnet_cifar10 — TensorFlow's official CIFAR-10 ResNet estimator
// (cifar10_main.py + cifar10_model.py + model_base.py), ported to cifarnet.
//
// ResNet v1 with 6n+2 layers, momentum SGD with TF semantics, the piecewise
// learning rate (boundaries at epochs 82/123/300), batch norm 0.997/1e-5,
// L2 weight decay over every trainable variable, pad-crop-flip augmentation.
// Same flags, defaults and validation errors as the seed (TF_SEMANTICS.md §3), plus a few
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
//   resnet_cifar10 --download --data-dir /tmp/cifar10_data --job-dir runs/r20 --num-gpus 0
//   resnet_cifar10 --data-dir /tmp/cifar10 --job-dir runs/tf --num-gpus 0   # .tfrecords
//   resnet_cifar10 --job-dir runs/r20 --num-gpus 0 --num-layers 20 --explain-plan   # step plans only
//
// --data-dir holds the binary files (or their cifar-10-batches-bin/) or the
// seed's train/validation/eval.tfrecords: data::Cifar10Source detects which.
//
// Under `mpirun -np N` (a build with MPI) it trains data-parallel. With --sync,
// synchronously: each process takes a disjoint 1/N of every global batch of
// --train-batch-size, gradients are averaged over the processes
// (distributed/data_parallel.hpp), and rank 0 alone logs, writes events and
// checkpoints and evaluates; a restart resumes on every rank from rank 0's
// latest checkpoint. --sync-batch-norm normalizes with the global batch's
// statistics. Without --sync, asynchronously, the seed's default: the first
// --num-ps ranks are parameter servers holding the variables, the others
// workers that each train on batches of --train-batch-size and push their
// gradients without waiting for one another (distributed/parameter_server.hpp);
// the first worker is the chief. Started without mpirun, it runs exactly as a
// single process.
//   mpirun -np 2 resnet_cifar10 --job-dir runs/r20x2 --num-gpus 0 --num-layers 20 --sync
//   mpirun -np 3 resnet_cifar10 --job-dir runs/r20ps --num-gpus 0 --num-layers 20 --num-ps 1
#include <CLI/CLI.hpp>

#include "../common/explain_plan.hpp"
#include "flags.hpp"

using namespace cifarnet;
using namespace resnet_cifar10;

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"ResNet v1 on CIFAR-10, ported from TensorFlow's cifar10_estimator (see TF_SEMANTICS.md §3)"};
  app.add_option(
      "--data-dir", f.data_dir,
      "The directory where the CIFAR-10 data is stored: the binary files (cifar-10-batches-bin, or "
      "a directory holding it) or the seed's train/validation/eval.tfrecords (cifar10_to_tfrecords). "
      "Without it, a small built-in synthetic set is used.");
  app.add_option("--input-format", f.input_format,
                 "auto (TFRecord files when --data-dir holds all three .tfrecords, else binary), binary or "
                 "tfrecords.")
      ->check(CLI::IsMember({"auto", "binary", "tfrecords"}))
      ->capture_default_str();
  examples::add_download_flags(app, f.download, "--data-dir");
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
  app.add_option("--weight-decay", f.weight_decay,
                 "L2 weight decay wd (adds wd * sum(v^2)/2 to the loss) on every trainable variable, as the "
                 "seed's tf.trainable_variables(): the convolution and dense weights, the dense biases, "
                 "batch norm gamma and beta.")
      ->capture_default_str();
  app.add_option("--learning-rate", f.learning_rate,
                 "This is the inital learning rate value. The learning rate will decrease during training.")
      ->capture_default_str();
  app.add_option("--use-distortion-for-training", f.use_distortion, "If doing image distortion for training.")
      ->capture_default_str();
  app.add_flag("--sync", f.sync,
               "If present when running in a distributed environment will run on sync mode.");
  app.add_option("--num-ps", f.num_ps,
                 "Under mpirun without --sync: the number of parameter servers, the first ranks; the others "
                 "are workers training asynchronously, the first of them the chief.")
      ->capture_default_str();
  app.add_option("--num-intra-threads", f.num_intra_threads,
                 "Number of threads for the compute kernels (OpenMP); 0 = one per core.")
      ->capture_default_str();
  app.add_option("--num-inter-threads", f.num_inter_threads,
                 "Number of input-pipeline worker threads; 0 = one.")
      ->capture_default_str();
  app.add_option("--data-format", f.data_format,
                 "channels_first (NCHW), channels_last (NHWC) or auto. Default: the layout recorded in the "
                 "job dir's checkpoint when resuming, else channels_first on GPUs and channels_last on the "
                 "CPU. auto: a new job measures a training step in both layouts on this machine and takes "
                 "the faster (a resume keeps the checkpoint's). Given and different from the checkpoint's, "
                 "the job resumes in the new layout.")
      ->check(CLI::IsMember({"channels_first", "channels_last", "auto"}));
  app.add_flag("--soft-placement,!--no-soft-placement", f.soft_placement,
               "With fewer GPUs present than --num-gpus, train on the ones present (the CPU when none) and "
               "say so (default, as the seed's allow_soft_placement), or stop with an error "
               "(--no-soft-placement).")
      ->capture_default_str();
  app.add_flag("--log-device-placement", f.log_device_placement, "Whether to log device placement.");
  app.add_flag("--deterministic", f.deterministic,
               "CUDA backend: only cuDNN convolution algorithms whose results are reproducible bit for bit "
               "(also CIFARNET_CUDA_DETERMINISTIC=1); no effect on the CPU backends.");
  app.add_flag("--allow-tf32", f.allow_tf32,
               "CUDA backend: let cuDNN convolutions use TF32 tensor cores (faster on Ampere and newer, "
               "about 1e-3 relative error; also CIFARNET_CUDA_TF32=1). Default: full fp32.");
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
  app.add_flag("--schedule-from-counted-examples", f.schedule_from_counted_examples,
               "The seed schedule's epochs of the training examples actually read (40000 for --train-split "
               "train: boundaries 25625/38437/93750 at batch 128) instead of the seed's hard-coded 45000 "
               "examples per epoch divided by batch x workers (28782/43173/105300), a number that does not "
               "match its own split and that its author questions in a comment.");
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
  app.add_option("--save-summaries-secs", f.save_summaries_secs,
                 "TF-Slim's: write summaries (every 100 steps) at most every N seconds (0: no limit).");
  app.add_option("--startup-delay-steps", f.startup_delay_steps,
                 "TF-Slim's: every asynchronous worker but the chief starts training when the global step "
                 "reaches N (0: at once; refused under --sync).")
      ->capture_default_str();
  app.add_option("--log-every-n-steps", f.log_every_n_steps,
                 "TF-Slim's log line, 'global step N: loss = L (S sec/step)', every N steps (0: off; the "
                 "estimator's own lines are logged either way).")
      ->capture_default_str();
  app.add_option(
      "--trace-every-n-steps", f.trace_every_n_steps,
      "TF-Slim's: write a Chrome trace of one step every N steps to <job-dir>/tf_trace-<step>.json "
      "(0: never).");
  app.add_option(
         "--precision", f.precision,
         "Arithmetic of the convolutions on the CPU: fp32, or bf16 (bf16 inputs and weights with fp32 "
         "accumulation, each convolution's output bf16 for its batch norm; master weights, optimizer and "
         "the other layers' arithmetic stay fp32; needs AVX-512).")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option(
         "--conv-algorithm", f.conv_algorithm,
         "Convolution algorithm on the CPU in fp32: auto (direct while training, so results do not depend "
         "on the CPU's instruction set), or winograd (Winograd F(4x4, 3x3) for the 3x3 stride-1 "
         "convolutions: on AVX2 and Zen 4 CPUs inside the own conv + batch norm kernels from 32 channels, "
         "about a quarter of their multiplies, errors around 1e-5 relative instead of 1e-6; "
         "docs/NUMERICS.md).")
      ->check(CLI::IsMember({"auto", "winograd"}))
      ->capture_default_str();
  app.add_option("--synthetic-examples", f.synthetic_examples, "Size of the built-in synthetic training set.")
      ->capture_default_str();
  app.add_flag("--explain-plan", f.explain_plan,
               examples::explain_plan_help("the evaluation's forward") +
                   " The model is built as training would build it (--num-layers, --precision, the layout "
                   "of --data-format or of the --job-dir's checkpoint, one tower's or replica's share of "
                   "--train-batch-size and --eval-batch-size).");
  // Distributed training (under mpirun).
  app.add_flag("--sync-batch-norm", f.sync_batch_norm,
               "Under mpirun: batch norm uses the statistics of the global batch over all processes "
               "(default: each process its own slice's, as the seed's towers).");
  app.add_flag("--overlap-allreduce,!--no-overlap-allreduce", f.overlap_allreduce,
               "Under mpirun: start each gradient bucket's all-reduce during backward, as soon as its "
               "gradients are final (default), or all of them after backward (--no-overlap-allreduce).")
      ->capture_default_str();
  app.add_option("--allreduce-bucket-kb", f.allreduce_bucket_kb,
                 "Under mpirun: size of each gradient all-reduce bucket in KiB (at least 4).")
      ->capture_default_str();
  app.add_option(
         "--collective-timeout", f.collective_timeout,
         "Under mpirun: seconds a process waits for the others in a collective (or, asynchronous, for "
         "a message) before it ends the job with an error (a dead or hung process).")
      ->capture_default_str();
  // Under mpirun, MPI starts first (it may take arguments of its own).
  recipes::Strategy st(&argc, &argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // An error: rank 0 (or the rank that met it, when not a flag error) says
  // why; distributed, the whole job then ends (the others would wait for this
  // process until --collective-timeout).
  auto fail = [&](const std::exception& e, int code) {
    if (st.chief() || code != 2)
      std::cerr << "resnet_cifar10: " << (st.size() > 1 ? "rank " + std::to_string(st.rank()) + ": " : "")
                << e.what() << "\n"
                << std::flush;
    return st.abort_job(code);
  };
  train::GpuPlacement gpus;
  try {
    st.configure(strategy_options(f));
    if (!st.chief()) std::cout.rdbuf(nullptr);  // only rank 0 prints
    validate(f, st);
    gpus = place_devices(f, st);
  } catch (const ConfigError& e) {  // the same on every rank: each exits cleanly
    if (st.chief()) std::cerr << "resnet_cifar10: " << e.what() << "\n";
    return 2;
  }
  try {
    NetworkBackend backend{make_onednn_session, pick_onednn_format, explain_onednn_plan};
    if constexpr (recipes::kHasCudaBackend) {
      if (f.num_gpus > 1) backend = {make_cuda_towers_session, pick_cuda_format, explain_cuda_plan};
      if (f.num_gpus == 1) backend = {make_cuda_session, pick_cuda_format, explain_cuda_plan};
    }
    if (f.explain_plan) return explain(f, st, gpus, backend);
    fetch_data(f, st);
    return run(f, st, gpus, backend);
  } catch (const ConfigError& e) {
    return fail(e, 2);
  } catch (const Error& e) {
    return fail(e, 1);
  } catch (const std::exception& e) {
    return fail(e, 1);
  }
}
