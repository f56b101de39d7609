// Probe: the own Winograd F(4x4,3x3) forward (AVX2 kernels) against the own
// direct forward (AVX-512) at ResNet's three stage shapes, batch 128, 2 threads.
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include "cifarnet/backend/onednn/winograd.hpp"
namespace dk = cifarnet::backend::onednn::direct::kernels;
namespace wg = cifarnet::backend::onednn::winograd;
template <int C>
void run(int H) {
  const int W = H, N = 128;
  std::mt19937 g(1);
  std::normal_distribution<float> d;
  const std::size_t img = std::size_t(H) * W * C;
  std::vector<float> x(N * img), w(9 * C * C), y0(x.size()), y1(x.size());
  for (auto& v : x) v = d(g);
  for (auto& v : w) v = d(g);
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> td, tw;
  wg::Conv3x3 conv;
  conv.set_weights(w.data(), 1, C, C);
  for (int rep = 0; rep < 11; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n)
      dk::Avx512::forward<C>(H, W, x.data() + n * img, w.data(), y0.data() + n * img);
    auto t1 = std::chrono::steady_clock::now();
    conv.run(N, H, W, x.data(), nullptr, false, y1.data());
    auto t2 = std::chrono::steady_clock::now();
    td.push_back(std::chrono::duration<double>(t1 - t0).count());
    tw.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  double err = 0, mx = 0;
  for (std::size_t i = 0; i < y0.size(); ++i) {
    err = std::max(err, double(std::abs(y0[i] - y1[i])));
    mx = std::max(mx, double(std::abs(y0[i])));
  }
  std::printf(
      "%2d ch %2dx%-2d batch %d: direct AVX-512 %.3f ms, Winograd AVX2 %.3f ms (%.2fx), max |diff| %.2e of "
      "max |y| %.2e\n",
      C, H, W, N, med(td) * 1e3, med(tw) * 1e3, med(td) / med(tw), err, mx);
}
int main() {
  std::printf("threads %d\n", omp_get_max_threads());
  for (int k = 0; k < 2; ++k) {
    run<16>(32);
    run<32>(16);
    run<64>(8);
  }
}
