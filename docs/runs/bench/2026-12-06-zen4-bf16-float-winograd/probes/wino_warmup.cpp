// The own Winograd forward (winograd::Layer) at VGG-19's 125x167 shapes, one image:
// 40 calls in one process, each timed (ms): how long the first calls take.
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/onednn/winograd.hpp>
#include <cifarnet/cifarnet.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
using namespace cifarnet;
namespace wg = backend::onednn::winograd;
int main(int argc, char** argv) {
  const std::size_t h = 125, w = 167, ci = argc > 1 ? std::atoi(argv[1]) : 64,
                    co = argc > 2 ? std::atoi(argv[2]) : 128;
  const ConvGeom g = ConvGeom::make(DataFormat::NHWC, Shape{1, ci, h, w}, co, 3, 1, Padding::Same);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(h * w * ci), wt(9 * ci * co), y(h * w * co);
  for (auto& v : x) v = u(rng);
  for (auto& v : wt) v = 0.05f * u(rng);
  std::vector<float> work(wg::Layer::work_bytes(g) / 4 + 64);
  wg::Layer layer;
  std::vector<double> t;
  for (int r = 0; r < 40; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    layer.forward(g, x.data(), wt.data(), 1, nullptr, false, y.data(), work.data());
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("%zu->%zu work %zu KiB:", ci, co, wg::Layer::work_bytes(g) >> 10);
  for (double v : t) std::printf(" %.1f", v);
  std::printf("\n");
}
