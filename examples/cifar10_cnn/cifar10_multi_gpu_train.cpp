// examples/cifar10_cnn/cifar10_multi_gpu_train.cpp — the TensorFlow CIFAR-10
// tutorial's cifar10_multi_gpu_train.py on cifarnet: the tutorial CNN in
// --num_gpus towers that share one set of variables.
//
// Each step takes --batch_size images per tower (num_gpus x batch_size in
// all), every tower computes the loss and gradients of its own slice, the
// gradients are averaged over the towers (the tutorial's average_gradients:
// the towers' losses are means over their slices, so the update is the one a
// single model makes on the whole num_gpus x batch_size batch) and one
// gradient-descent step updates the shared variables; the EMA, summaries,
// checkpoints and the log line are cifar10_train's (train_loop.hpp), with
// examples/sec counting every tower's images. The learning rate decays every
// 350 epochs of num_gpus x batch_size steps, as the tutorial's.
//
// Where the towers run: with the CUDA backend in the build and at least
// --num_gpus GPUs, tower i on GPU i (distributed::Towers, gradients summed
// on the host); otherwise on the CPU (oneDNN), one tower after the other,
// which computes exactly what the GPUs would, only without their speed.
//
// --use_fp16: the tutorial stores variables and activations in float16. CPUs
// have no float16 arithmetic; on CPUs with bf16 kernels (AVX512-BF16, AMX)
// the convolutions run in bf16 with fp32 weights, optimizer and other layers
// (NetOptions::conv_precision), and elsewhere the run says so and stays fp32.
// On GPUs it is refused (no half-precision path in the CUDA backend yet).
//
//   cifar10_multi_gpu_train --num_gpus 2 --data_dir ../shared/data/cifar-10-batches-bin --train_dir runs/mgpu
//   cifar10_multi_gpu_train --num_gpus 2 --max_steps 100      # built-in synthetic data, CPU towers
#include <iostream>
#include <string>

#include "train_loop.hpp"

#ifdef CIFARNET_WITH_CUDA
#include "multi_gpu_cuda.hpp"
#endif

using namespace cifarnet;

namespace {

struct Flags : cifar10::TrainFlags {
  int num_gpus = 1;
  bool use_fp16 = false;
};

int run(const Flags& f) {
  cifar10::validate_train(f);
  if (f.num_gpus < 1) throw ConfigError("--num_gpus must be >= 1, got " + std::to_string(f.num_gpus));
  const std::size_t towers = std::size_t(f.num_gpus);
  const std::size_t batch = towers * std::size_t(f.batch_size);
#ifdef CIFARNET_WITH_CUDA
  if (cifar10::gpus_for_towers(f.num_gpus)) {
    if (f.use_fp16)
      throw ConfigError("--use_fp16: the CUDA backend has no half-precision path yet; run without it");
    if (f.log_device_placement)
      std::cout << "device: " << f.num_gpus << " GPU(s); tower i on GPU i, the variables and the update on "
                << "GPU 0's tower (host arena)\n";
    const auto net = cifar10::make_gpu_session(f.num_gpus, f.seed, cifar10::trainer_options(f));
    return cifar10::train(f, *net, batch,
                          "Tutorial CNN in " + std::to_string(f.num_gpus) + " tower(s) of batch " +
                              std::to_string(f.batch_size) + " on " + std::to_string(f.num_gpus) + " GPU(s)");
  }
#endif
  NetOptions opts = cifar10_cnn_options();
  std::string precision = "fp32";
  if (f.use_fp16) {
    if (backend::onednn::cpu_has_bf16_convolutions()) {
      opts.with_conv_precision(ConvPrecision::BF16);
      precision = "--use_fp16: bf16 convolutions (fp32 weights, optimizer and other layers)";
    } else {
      precision =
          "fp32 (--use_fp16 asked: this CPU has neither float16 arithmetic nor bf16 kernels (AVX512-BF16 "
          "or AMX))";
    }
  }
  if (f.log_device_placement) cifar10::log_cpu_placement(std::cout);
  const auto net = cifar10::make_cpu_session(towers, opts, f.seed, cifar10::trainer_options(f));
  return cifar10::train(f, *net, batch,
                        "Tutorial CNN in " + std::to_string(towers) + " tower(s) of batch " +
                            std::to_string(f.batch_size) + " on the CPU (no GPU backend or too few GPUs), " +
                            precision);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Trains the tutorial CNN in towers sharing one set of variables (cifar10_multi_gpu_train.py)"};
  cifar10::add_train_flags(app, f);
  app.add_option("--num_gpus", f.num_gpus, "How many GPUs (towers) to use.")->capture_default_str();
  app.add_flag("--use_fp16", f.use_fp16,
               "Train with half-precision arithmetic (on CPUs: bf16 convolutions where the CPU has them).");
  return examples::parse_and_run(app, argc, argv, "cifar10_multi_gpu_train", [&] { return run(f); });
}
