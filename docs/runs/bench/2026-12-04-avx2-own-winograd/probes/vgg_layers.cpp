// VGG-19's 3x3 convolutions at style transfer's 250x333 (batch 1, NHWC, to
// conv5_1; conv1_1's 3 input channels aside): the own Winograd F(4x4, 3x3)
// forward and data gradient (backend/onednn/winograd.hpp) against oneDNN's
// direct forward and backward_data (ops::Conv2d, ConvAlgorithm::Direct),
// median of 7 runs after 2, in ms, with the rate each reaches counted in
// the direct algorithm's multiply-adds (2 x 9 ci co per output pixel).
// Build: g++ -O2 -std=c++17 -fopenmp -I include -I /usr/include/eigen3 vgg_layers.cpp -ldnnl
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
template <class F>
double ms(F&& f) {
  f();
  f();
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[3];
}
int main() {
  struct L {
    const char* name;
    std::size_t h, w, ci, co;
  };
  const L layers[] = {{"conv1_2", 250, 333, 64, 64},   {"conv2_1", 125, 167, 64, 128},
                      {"conv2_2", 125, 167, 128, 128}, {"conv3_1", 63, 84, 128, 256},
                      {"conv3_x", 63, 84, 256, 256},   {"conv4_1", 32, 42, 256, 512},
                      {"conv4_x", 32, 42, 512, 512},   {"conv5_1", 16, 21, 512, 512}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Device<backend::OneDnn> dev;
  std::printf("%-8s %9s %9s %9s %9s   %9s %9s   (GFLOP/s direct-equivalent: wino fwd, wino dx)\n", "layer",
              "wino fwd", "dnnl fwd", "wino dx", "dnnl dx", "", "");
  double tw = 0, td = 0;
  for (const L& l : layers) {
    const ConvGeom g = ConvGeom::make(DataFormat::NHWC, Shape{1, l.ci, l.h, l.w}, l.co, 3, 1, Padding::Same);
    std::vector<float> x(l.h * l.w * l.ci), w(9 * l.ci * l.co), b(l.co), y(l.h * l.w * l.co), dx(x.size());
    for (auto& v : x) v = u(rng);
    for (auto& v : w) v = 0.05f * u(rng);
    wg::Layer layer;
    ops::Conv2d<backend::OneDnn, float> conv;
    conv.set_algorithm(ConvAlgorithm::Direct);
    conv.set_weights_version(1);
    const double wf = ms([&] { layer.forward(g, x.data(), w.data(), 1, b.data(), false, y.data()); });
    const double df = ms([&] { conv.forward(dev, g, x.data(), w.data(), b.data(), y.data()); });
    const double wb = ms([&] { layer.backward_data(g, y.data(), w.data(), 1, dx.data()); });
    const double db = ms([&] { conv.backward_data(dev, g, y.data(), w.data(), dx.data()); });
    const double gf = 2.0 * 9 * double(l.ci) * double(l.co) * double(l.h * l.w) * 1e-9;
    std::printf("%-8s %9.2f %9.2f %9.2f %9.2f   %9.0f %9.0f\n", l.name, wf, df, wb, db, gf / wf * 1e3,
                gf / wb * 1e3);
    const int times = l.name[6] == 'x' ? (l.name[4] == '3' || l.name[4] == '4' ? 3 : 1) : 1;
    tw += times * (wf + wb);
    td += times * (df + db);
  }
  std::printf("sum over the network (conv3_x, conv4_x x3): wino %.1f ms, dnnl direct %.1f ms\n", tw, td);
}
