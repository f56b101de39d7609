#include <cifarnet/backend/onednn.hpp>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
using namespace cifarnet;
int main() {
  Device<backend::OneDnn> dev;
  ops::BatchNorm<backend::OneDnn, float> bn;
  for (auto [c, hw] : {std::pair{16, 32}, {32, 16}, {64, 8}}) {
    ChannelGeom g{DataFormat::NHWC, 128, size_t(c), size_t(hw), size_t(hw)};
    std::vector<float> x(g.size()), y(g.size()), dy(g.size()), dx(g.size()), gamma(c, 1.f), beta(c, 0.f),
        mean(c), var(c), dg(c), db(c);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = float((i * 7919) % 1000) / 500.f - 1.f;
      dy[i] = float((i * 104729) % 1000) / 1000.f - .5f;
    }
    auto time = [&](auto f) {
      std::vector<double> v;
      for (int i = 0; i < 30; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        v.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(v.begin(), v.end());
      return v[v.size() / 2] * 1e3;
    };
    double f = time([&] {
      bn.forward_train(dev, g, 1e-5, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(),
                       true);
    });
    double b = time([&] {
      bn.backward(dev, g, 1e-5, x.data(), dy.data(), gamma.data(), mean.data(), var.data(), dx.data(),
                  dg.data(), db.data(), true);
    });
    double mb = g.size() * 4 / 1e6;
    printf(
        "C=%d %dx%d (%.1f MB): fwd %.3f ms (%.1f GB/s for 3 passes)  bwd %.3f ms (%.1f GB/s for 5 passes)\n",
        c, hw, hw, mb, f, 3 * mb / f, b, 5 * mb / b);
  }
}
