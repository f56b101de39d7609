// bn::input_gradient<16> over ResNet's stage-1 shape in bf16 (x and dy bits, the
// ReLU mask, dx bits), warm and with the data evicted (48 Mi floats touched
// before each call): medians and 90th percentiles of 41 calls. The patched
// kernel splits the rows into dynamic chunks of DYN rows when DYN > 0.
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include "cifarnet/backend/onednn/bn_kernels.hpp"
using namespace cifarnet;
namespace on = cifarnet::backend::onednn;
static std::vector<float> junk(48u << 20);
int main() {
  const std::size_t n = 128, h = 32, C = 16, px = n * h * h;
  std::vector<std::uint16_t> c(px * C, 0x3f80), g(px * C, 0x3a00), out(px * C);
  std::vector<float> ab(2 * C, 1.f), m(C, 0.f), A(C, 1.f), B(C, 0.f), D(C, 0.f);
  const ChannelGeom cg{DataFormat::NHWC, n, C, h, h};
  for (int cold = 0; cold < 2; ++cold) {
    std::vector<double> t;
    for (int r = 0; r < 41; ++r) {
      if (cold)
        for (auto& v : junk) v += 1.f;
      auto t0 = std::chrono::steady_clock::now();
      on::bn::input_gradient<16>(cg, c.data(), g.data(), ab.data(), m.data(), A.data(), B.data(), D.data(),
                                 nullptr, out.data());
      auto t1 = std::chrono::steady_clock::now();
      t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(t.begin(), t.end());
    std::printf("%s: median %.3f ms, p90 %.3f\n", cold ? "cold" : "warm", t[20], t[36]);
  }
}
