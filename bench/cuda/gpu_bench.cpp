// bench/cuda/gpu_bench.cpp — images/s of the CIFAR ResNets on one GPU
// through backend::Cuda, with cifarnet_bench's protocol: warm-up steps
// untimed, then R repetitions of S consecutive steps; the per-step time of a
// repetition is its block time / S (the device synchronised at the end of
// the block); median, min and max over repetitions.
//
//   build/bench/cuda/gpu_bench [--only resnet20,resnet56,infer20,infer56] [--formats nhwc,nchw]
//       [--reps 5] [--steps 10] [--warmup 10] [--batch 128] [--infer-batch 100]
//
// A training step is what a user's loop does: forward, softmax
// cross-entropy (loss and d/dlogits), backward, then weight decay 2e-4 and
// momentum 0.9 through optim::Chain. It measures the backend as it is
// (whatever it stages through PCIe), not a kernel in isolation. Without a GPU
// it says so and exits 0 (a benchmark with nothing to measure).
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

using namespace cifarnet;

namespace {

using Clock = std::chrono::steady_clock;

struct Protocol {
  int reps = 5, steps = 10, warmup = 10;
};

void sync() {
  if (cudaDeviceSynchronize() != cudaSuccess) throw Error("cudaDeviceSynchronize failed");
}

template <class Step>
void time_steps(const std::string& name, DataFormat fmt, std::size_t batch, const Protocol& p, Step&& step) {
  for (int i = 0; i < p.warmup; ++i) step();
  sync();
  std::vector<double> per;
  for (int r = 0; r < p.reps; ++r) {
    const auto t0 = Clock::now();
    for (int s = 0; s < p.steps; ++s) step();
    sync();
    per.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / p.steps);
  }
  std::sort(per.begin(), per.end());
  const double med = per[per.size() / 2];
  std::printf("%-9s %-5s batch %3zu  %9.1f img/s  [%.1f - %.1f]  (%.2f ms/step)\n", name.c_str(),
              fmt == DataFormat::NHWC ? "nhwc" : "nchw", batch, double(batch) / med,
              double(batch) / per.back(), double(batch) / per.front(), med * 1e3);
  std::fflush(stdout);
}

void train(int depth, DataFormat fmt, std::size_t batch, const Protocol& p) {
  Model<ResNetCifar<>, backend::Cuda> net({3, 32, 32}, fmt, resnet_options(depth), 1);
  Rng rng(2);
  Tensor<float> x = make_tensor<float>({batch, 3, 32, 32}, fmt);
  for (auto& v : x) v = float(rng.uniform(0, 255));
  std::vector<std::int32_t> y(batch);
  for (auto& l : y) l = std::int32_t(rng.uniform_int(10));
  optim::Chain<optim::WeightDecay, optim::Momentum> opt(net.parameters(), optim::WeightDecayOptions(2e-4),
                                                        optim::MomentumOptions().momentum(0.9));
  Tensor<float> d;
  time_steps("resnet" + std::to_string(depth), fmt, batch, p, [&] {
    softmax_cross_entropy(net.forward(x, Mode::Train), y, &d);
    net.backward(d);
    opt.step(net.parameters(), 0.1);
  });
}

void infer(int depth, DataFormat fmt, std::size_t batch, const Protocol& p) {
  Model<ResNetCifar<>, backend::Cuda> net({3, 32, 32}, fmt, resnet_options(depth), 1);
  Rng rng(3);
  Tensor<float> x = make_tensor<float>({batch, 3, 32, 32}, fmt);
  for (auto& v : x) v = float(rng.uniform(0, 255));
  time_steps("infer" + std::to_string(depth), fmt, batch, p, [&] { net.forward(x, Mode::Infer); });
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
        train(std::stoi(b.substr(6)), fmt, batch, p);
      else
        infer(std::stoi(b.substr(5)), fmt, infer_batch, p);
    }
  return 0;
}
