// VGG-19's 3x3 convolutions at 250x333 (one image), fp32, ConvAlgorithm::Winograd:
// forward and data gradient, median of 9 calls after 2, ms. Which Winograd runs
// (oneDNN's or the own kernels) follows the headers it was built with: 66d8049's
// take oneDNN's AVX-512 Winograd on a Zen 4, the next commit's the own kernels.
// Build: g++ -O3 -march=native -std=c++17 -fopenmp -I <headers> -I /usr/include/eigen3 vgg_wino.cpp -ldnnl
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
  const L ls[] = {{250, 333, 64, 64}, {125, 167, 64, 128}, {125, 167, 128, 128}, {63, 84, 128, 256},
                  {63, 84, 256, 256}, {32, 42, 256, 512},  {32, 42, 512, 512},   {16, 21, 512, 512}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Device<B> dev;
  for (const L& l : ls) {
    const ConvGeom g = ConvGeom::make(DataFormat::NHWC, Shape{1, l.ci, l.h, l.w}, l.co, 3, 1, Padding::Same);
    std::vector<float> x(l.h * l.w * l.ci), w(9 * l.ci * l.co), y(l.h * l.w * l.co), dx(x.size());
    for (auto& v : x) v = u(rng);
    for (auto& v : w) v = 0.05f * u(rng);
    ops::Conv2d<B, float> conv;
    conv.set_algorithm(ConvAlgorithm::Winograd);
    conv.set_weights_version(1);  // frozen weights, as in the style transfer
    const double f = ms([&] { conv.forward(dev, g, x.data(), w.data(), nullptr, y.data()); });
    const double b = ms([&] { conv.backward_data(dev, g, y.data(), w.data(), dx.data()); });
    std::printf("%3zux%3zu %3zu->%3zu own=%d fwd %7.3f ms  dx %7.3f ms\n", l.h, l.w, l.ci, l.co,
                int(conv.uses_own_winograd(g)), f, b);
  }
}
