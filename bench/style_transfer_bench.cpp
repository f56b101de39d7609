// style_transfer_bench — seconds per style-transfer iteration (TF_SEMANTICS.md §6) at
// 250x333 with VGG-19-shaped random weights on the oneDNN backend, and the
// parts of one iteration: forward to conv5_1, the Gatys losses and their
// tap gradients, backward with frozen weights (activation gradients only, what
// style transfer needs) against a full backward (weight gradients too), and
// the Adam update of the image.
//
//   OMP_NUM_THREADS=2 style_transfer_bench [--reps 7] [--warmup 2] [--format nhwc|nchw|both]
//                                          [--height 250] [--width 333] [--divisor 1|16]
//                                          [--conv-algorithm auto|direct|winograd]
//                                          [--precision fp32|bf16] [--plan-training 1|0]
//
// Each figure is the median (min, max) over --reps timed repetitions of one
// call after --warmup untimed ones. Compare with the PyTorch peer:
//   /usr/bin/python3 ../shared/bench/peer_torch.py --only gatys
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/vgg19.hpp>
#include <cifarnet/vision/style_transfer.hpp>
#include <cifarnet/demo/images.hpp>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cli.hpp"

using namespace cifarnet;
using namespace cifarnet::vision;

namespace {

struct Args {
  int reps = 7, warmup = 2, divisor = 1;
  std::size_t height = 250, width = 333;
  std::string format = "both";
  ConvAlgorithm alg = ConvAlgorithm::Auto;
  ConvPrecision prec = ConvPrecision::F32;
  int training_executor = NetOptions{}.plan_training ? 1 : 0;  // --plan-training
};

struct Stat {
  double median, min, max;
};

Stat time_it(int warmup, int reps, const std::function<void()>& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), t.back()};
}

void report(const char* fmt, const char* what, const Stat& s) {
  std::printf("  %-5s %-44s %8.4f s  [%.4f - %.4f]\n", fmt, what, s.median, s.min, s.max);
  std::fflush(stdout);
}

template <int D>
void bench(const Args& a, DataFormat fmt) {
  using M = Model<Vgg19Features<D>, backend::OneDnn, float>;
  const char* name = fmt == DataFormat::NHWC ? "nhwc" : "nchw";
  M net({3, a.height, a.width}, fmt,
        vgg19_random_options().with_conv_algorithm(a.alg).with_conv_precision(a.prec).with_plan_training(
            a.training_executor != 0),
        1,
        /*input_gradient=*/true);
  StyleTransferOptions o;
  o.height = a.height;
  o.width = a.width;
  StyleTransfer<M> st(net, o, builtin_content_image(a.height, a.width),
                      builtin_style_image(a.height, a.width));

  // One whole iteration as the example runs it: forward, losses, frozen backward, Adam.
  report(name, "iteration (fwd + losses + frozen bwd + Adam)", time_it(a.warmup, a.reps, [&] { st.step(); }));

  Parameters<float>& img = st.image_parameters();
  GatysLoss<M>& loss = st.loss_function();
  report(name, "losses forward only (fwd + Gram + losses)",
         time_it(a.warmup, a.reps, [&] { loss.evaluate(img.value(0)); }));

  // Backward alone, with the tap gradients of a real evaluation in place.
  img.zero_grad();
  loss.evaluate(img.value(0), img.grad(0));  // leaves a Train-mode forward and the tap gradients
  Tensor<float> dy = make_tensor<float>(net.output_shape(1), fmt);
  std::fill(dy.begin(), dy.end(), 0.0f);
  net.set_weight_gradients(false);
  const Stat frozen = time_it(a.warmup, a.reps, [&] { net.backward(dy); });
  report(name, "backward, weights frozen (input grad only)", frozen);
  net.set_weight_gradients(true);
  const Stat full = time_it(a.warmup, a.reps, [&] { net.backward(dy); });
  report(name, "backward, full (input + weight grads)", full);
  net.set_weight_gradients(false);
  std::printf("  %-5s frozen / full backward = %.2f\n", name, frozen.median / full.median);
  // The forward of the current image (H x W x 3, mean subtracted, as the
  // iteration feeds it): a zero input runs the random weights into
  // denormal floats deep in the net, which this CPU computes 5-8x slower
  // (measured at 7ab83e9: 0.60 s against 0.11 s; 0.11 s with FTZ/DAZ set).
  Tensor<float> x = make_tensor<float>(net.input_shape(1), fmt);
  const float* im = img.value(0);
  const std::size_t hw = std::size_t(a.height) * std::size_t(a.width);
  for (std::size_t p = 0; p < hw; ++p)
    for (std::size_t c = 0; c < 3; ++c)
      x.data()[fmt == DataFormat::NHWC ? p * 3 + c : c * hw + p] = im[p * 3 + c];
  report(name, "forward to conv5_1 (Mode::Train)", time_it(a.warmup, a.reps, [&] { net.forward(x); }));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{
      "seconds per style-transfer iteration and its parts on the oneDNN backend (docs/BENCHMARKS.md)"};
  app.add_option("--reps", a.reps, "Timed repetitions per figure.")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--warmup", a.warmup, "Untimed calls first.")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app.add_option("--format", a.format, "Data format: nhwc, nchw or both.")
      ->check(CLI::IsMember({"nhwc", "nchw", "both"}))
      ->capture_default_str();
  app.add_option("--height", a.height, "Image height.")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--width", a.width, "Image width.")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--divisor", a.divisor, "VGG-19's channel counts divided by 1 (the real net) or 16.")
      ->check(CLI::IsMember({1, 16}))
      ->capture_default_str();
  app.add_option("--plan-training", a.training_executor,
                 "1: the training passes through the training executor (NetOptions::plan_training); 0: the "
                 "layer tree, every layer on its own.")
      ->check(CLI::IsMember({0, 1}))
      ->capture_default_str();
  bench_cli::add_conv_flags(app, a.alg, a.prec);
  if (const auto rc = bench_cli::parse_flags(app, argc, argv)) return *rc;
  std::string load;
  std::getline(std::ifstream("/proc/loadavg"), load);
  std::printf(
      "style_transfer_bench: VGG-19 (channels / %d) to conv5_1, random weights, %zux%zu, oneDNN %s "
      "convolutions, %d OpenMP threads, %d reps after %d warm-up, conv algorithm %s, training executor %d; "
      "loadavg %s\n",
      a.divisor, a.height, a.width, to_string(a.prec), omp_get_max_threads(), a.reps, a.warmup,
      a.alg == ConvAlgorithm::Auto     ? "auto"
      : a.alg == ConvAlgorithm::Direct ? "direct"
                                       : "winograd",
      a.training_executor, load.c_str());
  try {
    for (DataFormat fmt : {DataFormat::NHWC, DataFormat::NCHW}) {
      if ((fmt == DataFormat::NHWC && a.format == "nchw") || (fmt == DataFormat::NCHW && a.format == "nhwc"))
        continue;
      if (a.divisor == 16)
        bench<16>(a, fmt);
      else
        bench<1>(a, fmt);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "style_transfer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
