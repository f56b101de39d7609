// airbench94's whitening at batch 2000: conv(3->24, 2x2, valid, bias) + GELU,
// as the step runs it today (float y, the GELU op, then the next conv's
// rounding of its float input: a reorder to bf16) against one conv with the
// bias and GELU as post-ops writing bf16. ms per call, median of 7.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
using namespace cifarnet;
using B = backend::OneDnn;
template <class F>
double ms(F&& f) {
  std::vector<double> t;
  for (int r = 0; r < 9; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    if (r >= 2) t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
int main() {
  Device<B> dev;
  const std::size_t n = 2000;
  const ConvGeom g = ConvGeom::make(DataFormat::NHWC, {n, 3, 32, 32}, 24, 2, 1, Padding::Valid);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> x(n * 32 * 32 * 3), w(2 * 2 * 3 * 24), b(24), y(n * 31 * 31 * 24), z(y.size());
  for (auto& v : x) v = nd(rng);
  for (auto& v : w) v = 0.3f * nd(rng);
  for (auto& v : b) v = 0.1f * nd(rng);
  std::vector<std::uint16_t> bits(y.size()), bits2(y.size());
  ops::Conv2d<B, float> conv;
  conv.set_precision(ConvPrecision::BF16);
  ops::Gelu<B, float> gelu;
  std::printf("has_gelu_bf16_dst: %d\n", int(conv.has_gelu_bf16_dst(dev, g, true)));
  const double a = ms([&] { conv.forward(dev, g, x.data(), w.data(), b.data(), y.data()); });
  const double c = ms([&] { gelu.forward(dev, y.size(), y.data(), z.data()); });
  const double r = ms([&] { backend::host::store_bf16(z.data(), bits.data(), z.size()); });
  const double f =
      ms([&] { conv.forward_gelu_bf16_dst(dev, g, x.data(), w.data(), b.data(), bits2.data()); });
  std::size_t same = 0;
  for (std::size_t i = 0; i < bits.size(); ++i) same += bits[i] == bits2[i];
  std::printf(
      "conv float y %.2f ms, GELU op %.2f ms, rounding (1 thread, stands for the reorder) %.2f ms; fused "
      "%.2f ms; same bits %.4f\n",
      a, c, r, f, double(same) / double(bits.size()));
}
