// VGG-19's 3x3 convolutions at 250x333 (one image), ConvAlgorithm::Auto (Winograd at a
// batch of 1), fp32 and bf16 ops: forward and data gradient, median of 9 calls after
// 2, ms; "own" says whether the fp32 op ran the own Winograd kernels. Built by ../run.sh.
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
using namespace cifarnet;
using B = backend::OneDnn;
template <class F>
double ms(F&& f) {
  f();
  f();
  std::vector<double> t;
  for (int r = 0; r < 9; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[4];
}
int main() {
  struct L {
    std::size_t h, w, ci, co;
  };
  const L ls[] = {{250, 333, 3, 64},    {250, 333, 64, 64}, {125, 167, 64, 128},
                  {125, 167, 128, 128}, {63, 84, 128, 256}, {63, 84, 256, 256},
                  {32, 42, 256, 512},   {32, 42, 512, 512}, {16, 21, 512, 512}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Device<B> dev;
  for (const L& l : ls) {
    const ConvGeom g = ConvGeom::make(DataFormat::NHWC, Shape{1, l.ci, l.h, l.w}, l.co, 3, 1, Padding::Same);
    std::vector<float> x(l.h * l.w * l.ci), w(9 * l.ci * l.co), y(l.h * l.w * l.co), dx(x.size());
    for (auto& v : x) v = u(rng);
    for (auto& v : w) v = 0.05f * u(rng);
    double r[2][2];
    int own[2];
    for (int p = 0; p < 2; ++p) {
      ops::Conv2d<B, float> conv;
      conv.set_algorithm(ConvAlgorithm::Auto);
      conv.set_precision(p ? ConvPrecision::BF16 : ConvPrecision::F32);
      conv.set_weights_version(1);
      r[p][0] = ms([&] { conv.forward(dev, g, x.data(), w.data(), nullptr, y.data()); });
      r[p][1] = ms([&] { conv.backward_data(dev, g, y.data(), w.data(), dx.data()); });
      own[p] = conv.uses_own_winograd(g);
    }
    std::printf(
        "%3zux%3zu %3zu->%3zu fp32(own=%d) fwd %7.3f dx %7.3f | bf16 fwd %7.3f dx %7.3f | ratio fwd %.2f dx "
        "%.2f\n",
        l.h, l.w, l.ci, l.co, own[0], r[0][0], r[0][1], r[1][0], r[1][1], r[1][0] / r[0][0],
        r[1][1] / r[0][1]);
  }
}
