// ResNet-20's 2x2/2 shortcut average pools at batch 128 (bf16 x in, the
// channel-padded float y; float dy from the padded gradient -> float dx):
// the kernels before (a copy of the header, old_avg_pool.hpp, which run.sh
// writes) against the library's. ms per call, median of 15; the bits
// compared.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include "old_avg_pool.hpp"  // run.sh writes it (the header before, renamed)
using namespace cifarnet;
namespace ap = cifarnet::backend::onednn::avg_pool;
namespace ao = cifarnet::backend::onednn::avg_pool_old;
template <class F>
double ms(F&& f) {
  std::vector<double> t;
  for (int r = 0; r < 17; ++r) {
    auto a = std::chrono::steady_clock::now();
    f();
    auto b = std::chrono::steady_clock::now();
    if (r >= 2) t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  for (std::size_t C : {16, 32}) {
    const std::size_t n = 128, H = C == 16 ? 32 : 16;
    const ConvGeom g = ConvGeom::make(DataFormat::NHWC, {n, C, H, H}, C, 2, 2, Padding::Valid);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    std::vector<std::uint16_t> x(n * C * H * H);
    for (auto& v : x) {
      float f = nd(rng);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      v = u >> 16;
    }
    std::vector<float> y(n * 2 * C * H * H / 4, 0.f), y2 = y, dy(y.size()), dx(x.size()), dx2(x.size());
    for (auto& v : dy) v = nd(rng);
    double f0 = ms([&] { ao::forward(g, x.data(), y.data(), 2 * C); });
    double b0 = ms([&] { ao::backward(g, dy.data(), dx.data(), 2 * C); });
    double f1 = ms([&] { ap::forward(g, x.data(), y2.data(), 2 * C); });
    double b1 = ms([&] { ap::backward(g, dy.data(), dx2.data(), 2 * C); });
    std::printf("C=%zu %zux%zu: forward %.3f -> %.3f ms, backward %.3f -> %.3f ms; same bits %d %d\n", C, H,
                H, f0, f1, b0, b1, std::memcmp(y.data(), y2.data(), y.size() * 4) == 0,
                std::memcmp(dx.data(), dx2.data(), dx.size() * 4) == 0);
  }
}
