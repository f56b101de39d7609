// ResNet's stride-1 3x3 stage shapes in inference (NHWC, batch 100, bias,
// residual sum and ReLU in the epilogue): oneDNN's convolution, the own
// direct kernels and the own Winograd kernels through
// ops::ConvEpilogue<OneDnn>::forward, each timed (median of 11 calls after
// 2) in turn, ROUNDS rounds in one process, to tell a kernel's own spread
// from the machine's. ms per call.
// Build: g++ -O3 -march=native -std=c++17 -fopenmp -I include -I /usr/include/eigen3 stage_shapes.cpp -ldnnl
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/onednn/conv_epilogue.hpp>
#include <cifarnet/cifarnet.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
using namespace cifarnet;
using Epi = ops::ConvEpilogue<backend::OneDnn, float>;

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
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  struct L {
    std::size_t n, h, c;
  };
  const L ls[] = {{100, 32, 16}, {100, 16, 32}, {100, 8, 64}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Device<backend::OneDnn> dev;
  struct Data {
    ConvGeom g;
    std::vector<float> x, w, b, y, s;
    Epi one, own, wino;
  };
  std::vector<Data> ds(3);
  for (int i = 0; i < 3; ++i) {
    const L& l = ls[i];
    Data& d = ds[std::size_t(i)];
    d.g = ConvGeom::make(DataFormat::NHWC, Shape{l.n, l.c, l.h, l.h}, l.c, 3, 1, Padding::Same);
    d.x.resize(l.n * l.h * l.h * l.c);
    d.w.resize(9 * l.c * l.c);
    d.b.resize(l.c);
    d.y.resize(d.x.size());
    d.s.resize(d.x.size());
    for (auto& v : d.x) v = u(rng);
    for (auto& v : d.w) v = 0.1f * u(rng);
    for (auto& v : d.s) v = u(rng);
  }
  for (int r = 0; r < rounds; ++r) {
    for (Data& d : ds) {
      auto run = [&](Epi& e, bool own, bool wino) {
        return ms([&] {
          e.forward(dev, d.g, d.x.data(), false, d.w.data(), d.b.data(), 1, false, d.s.data(), false,
                    d.y.data(), false, true, own, wino);
        });
      };
      const double a = run(d.one, false, false), b = run(d.own, true, false), c = run(d.wino, false, true);
      std::printf("round %d, %zux%zu, %zu -> %zu: oneDNN %.3f, own direct %.3f, own Winograd %.3f ms\n",
                  r + 1, d.g.ih, d.g.iw, d.g.ic, d.g.oc, a, b, c);
    }
    std::fflush(stdout);
  }
}
