#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/reference.hpp>
#include LRN_KERNELS  // the new loops, beside the old op (oneDNN primitive)
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include <algorithm>
using namespace cifarnet;
namespace lk = cifarnet::backend::onednn::lrn;
template <class F>
double best_ms(F&& f, int reps = 7) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
int main() {
  Device<backend::OneDnn> dev;
  Device<backend::Reference> rdev;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  const int T = omp_get_max_threads();
  for (auto fmt : {DataFormat::NHWC, DataFormat::NCHW})
    for (std::size_t n : {32u, 128u})
      for (std::size_t r : {4u, 2u}) {
        ChannelGeom g{fmt, n, 64, 12, 12};
        LrnParams p{r, 1.0, 0.001 / 9, 0.75};
        std::vector<float> x(g.size()), dy(g.size()), y(g.size()), dx(g.size()), y2(g.size()), dx2(g.size());
        for (auto& v : x) v = nd(rng);
        for (auto& v : dy) v = nd(rng);
        ops::Lrn<backend::OneDnn, float> op;
        std::vector<float> scratch(T * lk::scratch_floats(g, r));
        double f1 = best_ms([&] { op.forward(dev, g, p, true, x.data(), y.data()); });
        double b1 = best_ms([&] { op.backward(dev, g, p, x.data(), y.data(), dy.data(), dx.data()); });
        double f2 = best_ms([&] { lk::forward(g, p, x.data(), y2.data(), scratch.data(), T); });
        double b2 = best_ms([&] { lk::backward(g, p, x.data(), dy.data(), dx2.data(), scratch.data(), T); });
        ops::Lrn<backend::Reference, double> ref;
        std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end()), yr(g.size()), dxr(g.size());
        ref.forward(rdev, g, p, true, xd.data(), yr.data());
        ref.backward(rdev, g, p, xd.data(), yr.data(), dyd.data(), dxr.data());
        double ro1 = 0, ro2 = 0, rb1 = 0, rb2 = 0;
        for (std::size_t i = 0; i < g.size(); ++i) {
          ro1 = std::max(ro1, std::abs(y[i] - yr[i]));
          ro2 = std::max(ro2, std::abs(y2[i] - yr[i]));
          rb1 = std::max(rb1, std::abs(dx[i] - dxr[i]));
          rb2 = std::max(rb2, std::abs(dx2[i] - dxr[i]));
        }
        std::printf("   vs double: y oneDNN %.2e own %.2e | dx oneDNN %.2e own %.2e\n", ro1, ro2, rb1, rb2);
        double ey = 0, ex = 0, my = 0, mx = 0;
        for (std::size_t i = 0; i < g.size(); ++i) {
          ey = std::max(ey, double(std::abs(y[i] - y2[i])));
          ex = std::max(ex, double(std::abs(dx[i] - dx2[i])));
          my = std::max(my, double(std::abs(y[i])));
          mx = std::max(mx, double(std::abs(dx[i])));
        }
        std::printf(
            "%s n%zu r%zu: oneDNN fwd %.3f bwd %.3f ms | own fwd %.3f bwd %.3f ms | max|dy| %.2e/%.2e "
            "max|ddx| %.2e/%.2e\n",
            fmt == DataFormat::NHWC ? "nhwc" : "nchw", n, r, f1, b1, f2, b2, ey, my, ex, mx);
      }
}
