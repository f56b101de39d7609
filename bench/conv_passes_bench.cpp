// bench/conv_passes_bench.cpp — milliseconds per call of each pass of
// cifarnet's oneDNN convolution op (ops::Conv2d<OneDnn, float>) on the six
// 3x3 geometries of a ResNet-20 training step (batch 128), in fp32 and with
// ConvPrecision::BF16. The bf16 times include the op's own conversions: x
// rounded to bf16 in forward (kept for backward_weights) and dy rounded in
// each backward call. This is the measurement behind the op's choice of
// which passes run in bf16 (backend/onednn/conv2d.hpp).
//
//   OMP_NUM_THREADS=2 build/bench/conv_passes_bench [--reps 7] [--format nhwc|nchw] [--batch 128]
//
// Each figure is the median of --reps calls after 3 untimed ones. The op's
// own bf16 paths run where it takes them (a mark after the bf16 figure):
// backward_data as a forward convolution of the flipped weights (f; on
// stride 2, two of them, one per row phase of dx), the weight gradient in
// the own AMX kernel (a), in the own AVX512-BF16 kernel (d) or as im2col +
// matmul (g);
// --onednn-backward-data and --onednn-weights turn the first two off, so
// that two runs compare them with oneDNN's kernels.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <omp.h>

#include <cifarnet/backend/onednn.hpp>

#include "cli.hpp"

using namespace cifarnet;
using B = backend::OneDnn;

int main(int argc, char** argv) {
  int reps = 7;
  std::size_t batch = 128;
  DataFormat fmt = DataFormat::NHWC;
  std::string format = "nhwc";
  CLI::App app{"ms per call of each pass of the oneDNN convolution op, fp32 and bf16 (docs/BENCHMARKS.md)"};
  app.add_option("--reps", reps, "Timed calls per figure (the median is shown).")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--format", format, "Data format: nhwc or nchw.")
      ->check(CLI::IsMember({"nhwc", "nchw"}))
      ->capture_default_str();
  app.add_option("--batch", batch, "Images per call.")->check(CLI::Range(1, 1000000))->capture_default_str();
  std::string net = "resnet";
  app.add_option("--net", net, "Whose 3x3 convolutions: resnet (ResNet-20's) or airbench (airbench94's).")
      ->check(CLI::IsMember({"resnet", "airbench"}))
      ->capture_default_str();
  std::vector<std::size_t> gemm_limits;
  app.add_option(
         "--gemm-weights", gemm_limits,
         "MAX_PIXELS MIN_OC: which bf16 weight gradients run as im2col + matmul (the op's default: 49 "
         "128; the op's set_gemm_weights_limits)")
      ->expected(2);
  bool onednn_bwd_data = false, onednn_weights = false;
  app.add_flag("--onednn-backward-data", onednn_bwd_data,
               "bf16 backward_data in oneDNN's backward_data kernel (the op's "
               "set_backward_data_via_forward(false))");
  app.add_flag("--onednn-weights", onednn_weights,
               "bf16 weight gradients without the own AMX or AVX512-BF16 kernel (the op's "
               "set_own_weights(false))");
  if (const auto rc = bench_cli::parse_flags(app, argc, argv)) return *rc;
  fmt = format == "nhwc" ? DataFormat::NHWC : DataFormat::NCHW;
  struct Shape {
    const char* name;
    std::size_t ic, hw, oc, stride;
  };
  const std::vector<Shape> resnet = {{"3->16 @32x32", 3, 32, 16, 1},       {"16->16 @32x32", 16, 32, 16, 1},
                                     {"16->32 s2 @32->16", 16, 32, 32, 2}, {"32->32 @16x16", 32, 16, 32, 1},
                                     {"32->64 s2 @16->8", 32, 16, 64, 2},  {"64->64 @8x8", 64, 8, 64, 1}};
  const std::vector<Shape> airbench = {{"24->64 @31x31", 24, 31, 64, 1},
                                       {"64->64 @15x15", 64, 15, 64, 1},
                                       {"64->256 @15x15", 64, 15, 256, 1},
                                       {"256->256 @7x7", 256, 7, 256, 1},
                                       {"256->256 @3x3", 256, 3, 256, 1}};
  const std::vector<Shape>& shapes = net == "airbench" ? airbench : resnet;
  std::printf(
      "conv_passes_bench: %d OpenMP threads, oneDNN %s, %s, batch %zu, bf16 kernels on this CPU: %s\n",
      omp_get_max_threads(), backend::onednn::version_string().c_str(), to_string(fmt), batch,
      backend::onednn::cpu_has_bf16_convolutions() ? "yes" : "no");
  std::printf("%-20s %21s %21s %21s   (ms: fp32 -> bf16)\n", "shape", "forward", "backward_data",
              "backward_weights");
  Device<B> dev;
  try {
    for (const Shape& s : shapes) {
      const ConvGeom g = ConvGeom::make(fmt, {batch, s.ic, s.hw, s.hw}, s.oc, 3, s.stride,
                                        s.stride == 1 ? Padding::Same : Padding::Explicit);
      std::vector<float> x(g.in_shape().size(), 0.5f), y(g.out_shape().size()), w(9 * s.ic * s.oc, 0.01f),
          dx(x.size()), dw(w.size()), dy(y.size(), 0.3f);
      double t[2][3];
      for (int p = 0; p < 2; ++p) {
        ops::Conv2d<B, float> op;
        op.set_precision(p ? ConvPrecision::BF16 : ConvPrecision::F32);
        op.set_keep_input(true);  // as in training
        if (!gemm_limits.empty()) op.set_gemm_weights_limits(gemm_limits[0], gemm_limits[1]);
        op.set_backward_data_via_forward(!onednn_bwd_data);
        op.set_own_weights(!onednn_weights);
        auto median_ms = [&](auto&& f) {
          for (int i = 0; i < 3; ++i) f();
          std::vector<double> v;
          for (int r = 0; r < reps; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            f();
            v.push_back(
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
          }
          std::sort(v.begin(), v.end());
          return v[v.size() / 2];
        };
        t[p][0] = median_ms([&] { op.forward(dev, g, x.data(), w.data(), nullptr, y.data()); });
        t[p][1] = median_ms(
            [&] { op.backward(dev, g, x.data(), dy.data(), w.data(), dx.data(), nullptr, nullptr); });
        t[p][2] = median_ms(
            [&] { op.backward(dev, g, x.data(), dy.data(), w.data(), nullptr, dw.data(), nullptr); });
        if (p == 1) {
          const char fd = op.uses_backward_data_via_forward(g) ? 'f' : ' ';
          const char fw = op.uses_amx_weights(g)    ? 'a'
                          : op.uses_own_weights(g)  ? 'd'
                          : op.uses_gemm_weights(g) ? 'g'
                                                    : ' ';
          std::printf("%-20s %8.3f -> %8.3f   %8.3f -> %8.3f%c  %8.3f -> %8.3f%c\n", s.name, t[0][0], t[1][0],
                      t[0][1], t[1][1], fd, t[0][2], t[1][2], fw);
        }
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "conv_passes_bench: %s\n", e.what());
    return 1;
  }
  std::printf(
      "bf16 backward_weights stays fp32 for inputs of < 8 channels, and for strided convolutions unless "
      "oneDNN runs bf16 on AMX (here: %s) or the own AVX512-BF16 kernel takes them (d; the op's rule);\n"
      "its bf16 column there is fp32 plus the rounding of dy for backward_data.\n",
      backend::onednn::cpu_has_amx_convolutions() ? "yes" : "no");
  return 0;
}
