// airbench94's max pools at batch 2000 (2x2/2 at 64 channels 31x31 and 256
// channels 15x15, 3x3/3 at 256 channels 7x7), bf16 x in: forward writing
// bf16 y bits and the argmax, backward writing bf16 dx; old kernels (a copy
// of the header before) against the library's. ms per call, median of 7;
// the bits compared.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include "old_max_pool.hpp"  // run.sh writes it (the header before, renamed)
using namespace cifarnet;
namespace mp = cifarnet::backend::onednn::max_pool;
namespace mo = cifarnet::backend::onednn::max_pool_old;
template <class F>
double ms(F&& f) {
  std::vector<double> t;
  for (int r = 0; r < 9; ++r) {
    auto a = std::chrono::steady_clock::now();
    f();
    auto b = std::chrono::steady_clock::now();
    if (r >= 2) t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
int main() {
  struct S {
    std::size_t C, H, k;
  };
  for (S s : {S{64, 31, 2}, S{256, 15, 2}, S{256, 7, 3}}) {
    const std::size_t n = 2000;
    const ConvGeom g = ConvGeom::make(DataFormat::NHWC, {n, s.C, s.H, s.H}, s.C, s.k, s.k, Padding::Valid);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    std::vector<std::uint16_t> x(g.in_shape().size());
    for (auto& v : x) {
      float f = nd(rng);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      v = std::uint16_t(u >> 16);
    }
    const std::size_t ny = n * s.C * g.oh * g.ow;
    std::vector<std::uint16_t> yb0(ny), yb1(ny), dx0(x.size()), dx1(x.size());
    std::vector<std::uint8_t> a0(ny), a1(ny);
    std::vector<float> dy(ny);
    for (auto& v : dy) v = nd(rng);
    double f0 = ms([&] { mo::forward(g, x.data(), static_cast<float*>(nullptr), a0.data(), yb0.data()); });
    double f1 = ms([&] { mp::forward(g, x.data(), static_cast<float*>(nullptr), a1.data(), yb1.data()); });
    double b0 = ms([&] { mo::backward_bf16(g, a0.data(), dy.data(), dx0.data()); });
    double b1 = ms([&] { mp::backward_bf16(g, a1.data(), dy.data(), dx1.data()); });
    std::printf(
        "C=%zu %zux%zu %zux%zu: forward %.2f -> %.2f ms, backward %.2f -> %.2f ms; same bits %d %d %d\n", s.C,
        s.H, s.H, s.k, s.k, f0, f1, b0, b1, yb0 == yb1, a0 == a1, dx0 == dx1);
  }
}
