// Probe: the batch norm's bf16 input gradient computed in the AMX weight
// gradient's copy of dy (and written out for the data gradient) against
// the input_gradient pass followed by the weight gradient.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <algorithm>
#include "cifarnet/backend/onednn/amx_wgrad.hpp"
using namespace cifarnet;
namespace on = cifarnet::backend::onednn;
using u16 = std::uint16_t;
static std::vector<float> junk(48u << 20);
static u16 bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return u16(u >> 16);
}
template <class F>
double tm(F&& f, bool cold) {
  std::vector<double> t;
  for (int r = 0; r < 15; ++r) {
    if (cold) {
      for (auto& v : junk) v += 1.f;
    }
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    if (r >= 2) t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
int main() {
  struct S {
    std::size_t n, h, c;
  } shapes[] = {{128, 32, 16}, {128, 16, 32}, {128, 8, 64}};
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto sh : shapes)
    for (int relu = 0; relu < 2; ++relu) {
      const std::size_t n = sh.n, h = sh.h, C = sh.c, px = n * h * h;
      std::vector<u16> x(px * C), c(px * C), g(px * C), dy1(px * C), dy2(px * C);
      for (auto& v : x) v = bits(nd(rng));
      for (auto& v : c) v = bits(nd(rng));
      for (auto& v : g) v = bits(nd(rng) * 1e-3f);
      std::vector<float> ab(2 * C), mean(C), A(C), B(C), D(C), dw1(9 * C * C), dw2(9 * C * C);
      for (std::size_t i = 0; i < C; ++i) {
        ab[i] = 1 + 0.1f * nd(rng);
        ab[C + i] = 0.1f * nd(rng);
        mean[i] = 0.1f * nd(rng);
        A[i] = nd(rng);
        B[i] = 1e-3f * nd(rng);
        D[i] = 1e-4f * nd(rng);
      }
      on::amx::WeightGrad wg(n, h, h, C, C, 3, 3, 1, 1, 1, 1);
      const ChannelGeom cg{DataFormat::NHWC, n, C, h, h};
      const float* ra = relu ? ab.data() : nullptr;
      auto unfused = [&] {
        if (C == 16)
          on::bn::input_gradient<16>(cg, c.data(), g.data(), ra, mean.data(), A.data(), B.data(), D.data(),
                                     nullptr, dy1.data());
        else if (C == 32)
          on::bn::input_gradient<32>(cg, c.data(), g.data(), ra, mean.data(), A.data(), B.data(), D.data(),
                                     nullptr, dy1.data());
        else
          on::bn::input_gradient<64>(cg, c.data(), g.data(), ra, mean.data(), A.data(), B.data(), D.data(),
                                     nullptr, dy1.data());
        wg.run(x.data(), dy1.data(), dw1.data());
      };
      const on::amx::DyMap dm{g.data(), c.data(), ra, mean.data(), A.data(), B.data(), D.data(), dy2.data()};
      auto fused = [&] { wg.run_dymap(x.data(), nullptr, dm, dw2.data()); };
      unfused();
      fused();
      const bool same_dy = dy1 == dy2, same_dw = std::memcmp(dw1.data(), dw2.data(), dw1.size() * 4) == 0;
      double tw[4];
      for (int cold = 0; cold < 2; ++cold) {
        tw[cold * 2] = tm(unfused, cold);
        tw[cold * 2 + 1] = tm(fused, cold);
      }
      std::printf(
          "%zu ch %zux%zu relu %d: dy bits %s, dw bits %s; warm %.3f -> %.3f ms (%.2fx), cold %.3f -> %.3f "
          "ms (%.2fx)\n",
          C, h, h, relu, same_dy ? "equal" : "DIFFER", same_dw ? "equal" : "DIFFER", tw[0], tw[1],
          tw[0] / tw[1], tw[2], tw[3], tw[2] / tw[3]);
    }
}
