// Probe: batch norm's three bf16 passes (NHWC, bf16 x and dy, the ReLU's
// mask recomputed: the statistics, the backward's sums, its input
// gradient written as bf16) at ResNet-20's three stage shapes, batch 128,
// 2 threads, warm and cold (512 MiB written between calls). Medians of 21.
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <vector>
#include <cifarnet/backend/onednn/bn_kernels.hpp>
using namespace cifarnet;
namespace bn = cifarnet::backend::onednn::bn;
static std::vector<char> evict(512u << 20);
template <class F>
double med(F&& f, bool cold) {
  std::vector<double> v;
  for (int r = 0; r < 21; ++r) {
    if (cold) {
#pragma omp parallel for
      for (size_t i = 0; i < evict.size(); i += 64) evict[i] += 1;
    }
    auto t0 = std::chrono::steady_clock::now();
    f();
    v.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(v.begin(), v.end());
  return v[10];
}
int main() {
  for (auto [c, hw] : {std::pair<size_t, size_t>{16, 32}, {32, 16}, {64, 8}}) {
    ChannelGeom g = ChannelGeom::make(DataFormat::NHWC, Shape{128, c, hw, hw});
    size_t n = g.size();
    std::vector<uint16_t> x(n), dy(n), dxb(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = backend::host::bf16_bits(float((i * 7919) % 1000) / 500.f - 1.f);
      dy[i] = backend::host::bf16_bits(float((i * 104729) % 1000) / 700.f - 0.5f);
    }
    std::vector<float> mean(c, 0.1f), A(c, 0.9f), B(c, 0.01f), D(c, 0.001f), ab(2 * c, 0.5f), shift(c, 0.f);
    bn::Scratch sc;
    double mb = n * 2 / 1e6;
    for (bool cold : {false, true}) {
      double ts = med(
          [&] {
            bn::with_channels(g, [&](auto cc) {
              bn::channel_sums<bn::SumKind::Stats, decltype(cc)::value>(g, x.data(), nullptr, nullptr,
                                                                        shift.data(), sc);
            });
          },
          cold);
      double tg = med(
          [&] {
            bn::with_channels(g, [&](auto cc) {
              bn::channel_sums<bn::SumKind::Grad, decltype(cc)::value, uint16_t, uint16_t>(
                  g, x.data(), dy.data(), ab.data(), shift.data(), sc);
            });
          },
          cold);
      double ti = med(
          [&] {
            bn::with_channels(g, [&](auto cc) {
              bn::input_gradient<decltype(cc)::value>(g, x.data(), dy.data(), ab.data(), mean.data(),
                                                      A.data(), B.data(), D.data(), nullptr, dxb.data());
            });
          },
          cold);
      printf(
          "C=%zu %s: stats %.3f (%.0f GB/s)  grad sums %.3f (%.0f GB/s)  input_gradient %.3f (%.0f GB/s)\n",
          c, cold ? "cold" : "warm", ts, mb / ts, tg, 2 * mb / tg, ti, 3 * mb / ti);
    }
  }
}
