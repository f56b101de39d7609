// ResNet's stride-1 3x3 stage shapes in inference (NHWC, batch 100): the
// own Winograd F(4x4, 3x3) forward (backend/onednn/winograd.hpp) against
// the own direct forward (direct::forward_inference), both with bias,
// residual sum and ReLU in their epilogue, median of 11 runs after 2, ms.
// Build: g++ -O2 -std=c++17 -fopenmp -I include -I /usr/include/eigen3 resnet_shapes.cpp -ldnnl
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/onednn/winograd.hpp>
#include <cifarnet/cifarnet.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
using namespace cifarnet;
namespace wg = cifarnet::backend::onednn::winograd;
namespace dc = cifarnet::backend::onednn::direct;
template <class F>
double ms(F&& f) {
  f();
  f();
  std::vector<double> t;
  for (int r = 0; r < 11; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[5];
}
int main() {
  struct L {
    std::size_t n, h, c;
  };
  const L ls[] = {{100, 32, 16}, {100, 16, 32}, {100, 8, 64}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const L& l : ls) {
    const ConvGeom g = ConvGeom::make(DataFormat::NHWC, Shape{l.n, l.c, l.h, l.h}, l.c, 3, 1, Padding::Same);
    std::vector<float> x(l.n * l.h * l.h * l.c), w(9 * l.c * l.c), b(l.c), y(x.size()), s(x.size());
    for (auto& v : x) v = u(rng);
    for (auto& v : w) v = 0.1f * u(rng);
    for (auto& v : s) v = u(rng);
    wg::Layer layer;
    const double a =
        ms([&] { layer.forward(g, x.data(), w.data(), 1, b.data(), true, y.data(), nullptr, s.data()); });
    const double d =
        ms([&] { dc::forward_inference(g, x.data(), w.data(), b.data(), s.data(), y.data(), true); });
    std::printf("batch %zu, %zux%zu, %zu -> %zu channels: own Winograd %.3f ms, own direct %.3f ms\n", l.n,
                l.h, l.h, l.c, l.c, a, d);
  }
}
