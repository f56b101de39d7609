// Probe: the own AMX forward (amx::Forward3x3, with an input map, no
// statistics) at ResNet-20's three stage shapes, batch 128, 2 threads,
// warm (the same tensors again) and cold (512 MiB written between calls, so
// x and y come from and go to memory, as in the training step), and its
// set_weights (the per-step packing). Medians of 11 calls.
#include <omp.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include "cifarnet/backend/onednn/amx_conv.hpp"
namespace amx = cifarnet::backend::onednn::amx;
static std::vector<char> evict(512u << 20);
template <class F>
double med(F&& f, bool cold) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> v;
  for (int r = 0; r < 11; ++r) {
    if (cold) {
#pragma omp parallel for
      for (size_t i = 0; i < evict.size(); i += 64) evict[i] += 1;
    }
    auto t0 = std::chrono::steady_clock::now();
    f();
    v.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(v.begin(), v.end());
  return v[5];
}
int main() {
  struct S {
    int c, hw;
  };
  for (S s : {S{16, 32}, S{32, 16}, S{64, 8}}) {
    size_t n = 128, c = s.c, hw = s.hw;
    std::vector<uint16_t> x(n * hw * hw * c), y(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = cifarnet::backend::host::bf16_bits(float(i % 97) / 97.f - 0.5f);
    std::vector<float> w(9 * c * c);
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(i % 13) / 13.f - 0.5f;
    std::vector<float> sc(c, 1.1f), sh(c, 0.1f);
    amx::InputMap m{sc.data(), sh.data(), true};
    amx::Forward3x3 k(n, hw, hw, c, c);
    k.set_weights(w.data());
    double t0 = med([&] { k.run(x.data(), &m, y.data(), nullptr); }, false);
    double t1 = med([&] { k.run(x.data(), &m, y.data(), nullptr); }, true);
    double t2 = med([&] { k.set_weights(w.data()); }, false);
    printf("%zu->%zu %zux%zu: mapped warm %.3f ms  cold %.3f ms  set_weights %.3f ms\n", c, c, hw, hw, t0, t1,
           t2);
  }
}
