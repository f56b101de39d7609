// bench/cuda/gpu_bench.cpp — images/s of the CIFAR ResNets on one GPU
// through backend::Cuda, with cifarnet_bench's protocol: warm-up steps
// untimed, then R repetitions of S consecutive steps; the per-step time of a
// repetition is its block time / S (the device synchronised at the end of
// the block); median, min and max over repetitions.
//
//   build/bench/cuda/gpu_bench [--only resnet20,resnet56,infer20,infer56] [--formats nhwc,nchw]
//       [--reps 5] [--steps 10] [--warmup 10] [--batch 128] [--infer-batch 100] [--staged] [--tf32]
//       [--graphs]
//
// Each line: <bench> <layout> <precision: fp32 or tf32> [graphs] batch <n> <images/s> img/s ...
// (scripts/gpu_table.sh reads them beside the PyTorch peer's). --graphs
// turns the Device's CUDA graphs on (Device::set_graphs: each step's
// repeated segments replayed as graphs) and prints what the launch queue
// did after each training benchmark.
//
// A training step is train::Trainer's: forward, softmax cross-entropy (loss
// and d/dlogits), backward, then weight decay 2e-4 and momentum 0.9 through
// optim::Chain, with the model's activations and gradients on the GPU and
// its parameter arena and momentum slot there too (Model::
// set_device_resident), as resnet_cifar10 --num-gpus 1 trains. --staged
// measures the debugging path instead: every tensor a host tensor, copied
// to the GPU and back by each op. It measures the backend as it is (whatever
// it copies through PCIe), not a kernel in isolation. Without a GPU it says
// so and exits 0 (a benchmark with nothing to measure).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "../cli.hpp"

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/train/trainer.hpp>

using namespace cifarnet;

namespace {

using Clock = std::chrono::steady_clock;

struct Protocol {
  int reps = 5, steps = 10, warmup = 10;
  bool tf32 = false;    ///< TF32 tensor-core math allowed for the convolutions
  bool graphs = false;  ///< CUDA graphs on (Device::set_graphs)
};

/// Everything the device was given has run: its launch queue first (CUDA
/// graphs: the last segment may still be queued), then the whole GPU.
void sync(Device<backend::Cuda>& dev) {
  dev.sync();
  if (cudaDeviceSynchronize() != cudaSuccess) throw Error("cudaDeviceSynchronize failed");
}

template <class Step>
void time_steps(Device<backend::Cuda>& dev, const std::string& name, DataFormat fmt, std::size_t batch,
                const Protocol& p, Step&& step) {
  for (int i = 0; i < p.warmup; ++i) step();
  sync(dev);
  std::vector<double> per;
  for (int r = 0; r < p.reps; ++r) {
    const auto t0 = Clock::now();
    for (int s = 0; s < p.steps; ++s) step();
    sync(dev);
    per.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / p.steps);
  }
  std::sort(per.begin(), per.end());
  const double med = per[per.size() / 2];
  std::printf("%-9s %-5s %-5s%s batch %3zu  %9.1f img/s  [%.1f - %.1f]  (%.2f ms/step)\n", name.c_str(),
              fmt == DataFormat::NHWC ? "nhwc" : "nchw", p.tf32 ? "tf32" : "fp32", p.graphs ? " graphs" : "",
              batch, double(batch) / med, double(batch) / per.back(), double(batch) / per.front(), med * 1e3);
  std::fflush(stdout);
}

using Net = Model<ResNetCifar<>, backend::Cuda>;

void time_training(int depth, DataFormat fmt, std::size_t batch, const Protocol& p, bool staged) {
  Net net({3, 32, 32}, fmt, resnet_options(depth), 1);
  if (p.tf32) backend::add_conv_options(net.device(), false, true);  // before the first op chooses engines
  if (staged)
    net.set_device_activations(false);
  else
    net.set_device_resident(true);  // before the optimizer: its slot goes to the GPU too
  net.device().set_graphs(p.graphs);
  Rng rng(2);
  train::Batch b;
  b.images = make_tensor<float>({batch, 3, 32, 32}, fmt);
  for (auto& v : b.images) v = float(rng.uniform(0, 255));
  for (std::size_t i = 0; i < batch; ++i) b.labels.push_back(std::int32_t(rng.uniform_int(10)));
  optim::Chain<optim::WeightDecay, optim::Momentum> opt(net.parameters(), optim::WeightDecayOptions(2e-4),
                                                        optim::MomentumOptions().momentum(0.9));
  train::Trainer<Net> t(net, train::TrainerOptions().max_steps(1 << 30));
  t.set_optimizer(opt, [](std::int64_t) { return 0.1; });
  time_steps(net.device(), "resnet" + std::to_string(depth), fmt, batch, p, [&] { t.step(b); });
  const backend::cuda::TransferCounts c = net.device().transfers().reset();
  const double steps = double(p.warmup + p.reps * p.steps);
  std::printf(
      "          PCIe per step: host->device %.3f MiB in %.1f copies, device->host %.3f MiB in %.1f copies\n",
      double(c.h2d_bytes) / steps / (1 << 20), double(c.h2d_copies) / steps,
      double(c.d2h_bytes) / steps / (1 << 20), double(c.d2h_copies) / steps);
  if (p.graphs) {
    const backend::cuda::LaunchQueueStats& g = net.device().graph_stats();
    std::printf(
        "          CUDA graphs: %.1f launches queued per step; segments: %llu replayed (%.1f launches per "
        "step inside them), %llu captured, %llu item by item%s%s\n",
        double(g.submitted) / steps, static_cast<unsigned long long>(g.replays),
        double(g.replayed_items) / steps, static_cast<unsigned long long>(g.captures),
        static_cast<unsigned long long>(g.eager_segments),
        g.disabled.empty() ? "" : "; off: ", g.disabled.c_str());
    if (!g.last_eager.empty()) std::printf("          last segment item by item: %s\n", g.last_eager.c_str());
  }
}

void time_inference(int depth, DataFormat fmt, std::size_t batch, const Protocol& p, bool staged) {
  Net net({3, 32, 32}, fmt, resnet_options(depth), 1);
  if (p.tf32) backend::add_conv_options(net.device(), false, true);
  if (staged) net.set_device_activations(false);
  net.device().set_graphs(p.graphs);
  Rng rng(3);
  Tensor<float> x = make_tensor<float>({batch, 3, 32, 32}, fmt);
  for (auto& v : x) v = float(rng.uniform(0, 255));
  time_steps(net.device(), "infer" + std::to_string(depth), fmt, batch, p,
             [&] { net.forward(x, Mode::Infer); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CIFAR ResNet training and inference images/s on one GPU (backend::Cuda)"};
  Protocol p;
  std::string only = "resnet20,resnet56,infer20,infer56", formats = "nhwc,nchw";
  std::size_t batch = 128, infer_batch = 100;
  app.add_option("--only", only, "Comma list of resnet20, resnet56, infer20, infer56");
  app.add_option("--formats", formats, "Comma list of nhwc, nchw");
  app.add_option("--reps", p.reps, "Timed repetitions")->check(CLI::PositiveNumber);
  app.add_option("--steps", p.steps, "Steps per repetition")->check(CLI::PositiveNumber);
  app.add_option("--warmup", p.warmup, "Untimed warm-up steps")->check(CLI::NonNegativeNumber);
  app.add_option("--batch", batch, "Training batch")->check(CLI::PositiveNumber);
  app.add_option("--infer-batch", infer_batch, "Inference batch")->check(CLI::PositiveNumber);
  bool staged = false;
  app.add_flag("--staged", staged, "Every tensor on the host, staged by each op (the debugging path)");
  app.add_flag("--tf32", p.tf32,
               "Allow TF32 tensor-core math in the convolutions (CIFARNET_CUDA_TF32's option; the "
               "precision column says tf32)");
  app.add_flag("--graphs", p.graphs,
               "CUDA graphs on (CIFARNET_CUDA_GRAPHS's option: repeated segments of a step replayed as one "
               "graph; the line says graphs)");
  if (const auto rc = bench_cli::parse_flags(app, argc, argv)) return *rc;
  // Flags are checked before the GPU is looked for, so a typo fails everywhere.
  std::vector<DataFormat> fmts;
  for (const std::string& f : bench_cli::split_list(formats)) {
    if (f != "nhwc" && f != "nchw") {
      std::fprintf(stderr, "gpu_bench: --formats: '%s' is neither nhwc nor nchw\n", f.c_str());
      return 2;
    }
    fmts.push_back(f == "nhwc" ? DataFormat::NHWC : DataFormat::NCHW);
  }
  const std::vector<std::string> benches = bench_cli::split_list(only);
  for (const std::string& b : benches)
    if (b != "resnet20" && b != "resnet56" && b != "infer20" && b != "infer56") {
      std::fprintf(stderr, "gpu_bench: --only: unknown benchmark '%s'\n", b.c_str());
      return 2;
    }
  if (backend::cuda::device_count() == 0) {
    std::printf("gpu_bench: no GPU (%s): nothing measured\n", backend::cuda::no_device_reason().c_str());
    return 0;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) std::printf("GPU 0: %s\n", prop.name);
  for (DataFormat fmt : fmts)
    for (const std::string& b : benches) {
      if (b[0] == 'r')
        time_training(std::stoi(b.substr(6)), fmt, batch, p, staged);
      else
        time_inference(std::stoi(b.substr(5)), fmt, infer_batch, p, staged);
    }
  return 0;
}
