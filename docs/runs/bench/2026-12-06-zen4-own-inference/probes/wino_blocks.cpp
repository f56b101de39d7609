// The own Winograd forward (backend/onednn/winograd.hpp) alone at ResNet's
// stride-1 stage shapes (batch 100) and VGG-19's first stages at 250x333
// (one image), with bias, residual sum and ReLU: median of 11 calls after 2,
// ms, ROUNDS rounds in one process; with OUT set, each shape's output is
// written to OUT.<n> so that two builds (the shared blocks before, the
// per-thread blocks after) can be compared bit for bit (cmp).
// Build: g++ -O3 -march=native -std=c++17 -fopenmp [-I <old headers>] -I include -I /usr/include/eigen3 \
//   wino_blocks.cpp -ldnnl
#include <cifarnet/backend/onednn/winograd.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>
using namespace cifarnet;
namespace wg = cifarnet::backend::onednn::winograd;

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

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  const char* out = std::getenv("OUT");
  struct L {
    std::size_t n, h, w, ci, co;
  };
  const L ls[] = {{100, 32, 32, 16, 16}, {100, 16, 16, 32, 32}, {100, 8, 8, 64, 64},    {1, 32, 32, 16, 16},
                  {1, 8, 8, 64, 64},     {1, 250, 333, 64, 64}, {1, 125, 167, 128, 128}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  struct Data {
    ConvGeom g;
    std::vector<float> x, w, b, y, s;
    wg::Layer layer;
  };
  std::vector<Data> ds(sizeof(ls) / sizeof(ls[0]));
  for (std::size_t i = 0; i < ds.size(); ++i) {
    const L& l = ls[i];
    Data& d = ds[i];
    d.g = ConvGeom::make(DataFormat::NHWC, Shape{l.n, l.ci, l.h, l.w}, l.co, 3, 1, Padding::Same);
    d.x.resize(l.n * l.h * l.w * l.ci);
    d.w.resize(9 * l.ci * l.co);
    d.b.resize(l.co);
    d.y.resize(l.n * l.h * l.w * l.co);
    d.s.resize(d.y.size());
    for (auto& v : d.x) v = u(rng);
    for (auto& v : d.w) v = 0.1f * u(rng);
    for (auto& v : d.b) v = u(rng);
    for (auto& v : d.s) v = u(rng);
  }
  for (int r = 0; r < rounds; ++r) {
    for (Data& d : ds) {
      const double t = ms([&] {
        d.layer.forward(d.g, d.x.data(), d.w.data(), 1, d.b.data(), true, d.y.data(), nullptr, d.s.data());
      });
      std::printf("round %d, batch %zu, %zux%zu, %zu -> %zu: own Winograd %.3f ms\n", r + 1, d.g.n, d.g.ih,
                  d.g.iw, d.g.ic, d.g.oc, t);
    }
    std::fflush(stdout);
  }
  if (out)
    for (std::size_t i = 0; i < ds.size(); ++i) {
      const std::string f = std::string(out) + "." + std::to_string(i);
      FILE* fp = std::fopen(f.c_str(), "wb");
      if (!fp) return 1;
      std::fwrite(ds[i].y.data(), sizeof(float), ds[i].y.size(), fp);
      std::fclose(fp);
    }
}
