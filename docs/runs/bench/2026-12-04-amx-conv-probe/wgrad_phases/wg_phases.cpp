#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#include <algorithm>
#include "wg_timed.hpp"
using namespace cifarnet::backend::onednn;
struct G {
  const char* name;
  std::size_t n, h, w, ic, oc, s;
};
static std::vector<float> junk(64u << 20);
#include <immintrin.h>
static void clf(const void* p, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; i += 64) _mm_clflush(static_cast<const char*>(p) + i);
  _mm_mfence();
}
static void flush() {
#pragma omp parallel for
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] += 1.f;
}
int main(int argc, char** argv) {
  std::vector<G> gs = {{"rn 16->16 @32", 128, 32, 32, 16, 16, 1},
                       {"rn 32->32 @16", 128, 16, 16, 32, 32, 1},
                       {"rn 64->64 @8", 128, 8, 8, 64, 64, 1},
                       {"rn 16->32 s2", 128, 32, 32, 16, 32, 2},
                       {"rn 32->64 s2", 128, 16, 16, 32, 64, 2}};
  const char* only = argc > 1 ? argv[1] : "";
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> d(0, 255);
  for (const G& g : gs) {
    if (*only && !std::strstr(g.name, only)) continue;
    const std::size_t oh = (g.h + 2 - 3) / g.s + 1, ow = (g.w + 2 - 3) / g.s + 1;
    std::vector<std::uint16_t> x(g.n * g.h * g.w * g.ic), dy(g.n * oh * ow * g.oc);
    for (auto& v : x) v = std::uint16_t(0x3f00 | d(rng));
    for (auto& v : dy) v = std::uint16_t(0x3f00 | d(rng));
    std::vector<float> dw(9 * g.ic * g.oc);
    amx::WeightGrad wg(g.n, g.h, g.w, g.ic, g.oc, 3, 3, 1, 1, g.s == 2 ? 0 : 1, g.s == 2 ? 0 : 1, g.s, g.s);
    for (int cold = 0; cold < 3; ++cold) {
      std::vector<double> t;
      std::memset(amx::g_t, 0, sizeof amx::g_t);
      for (int r = 0; r < 11; ++r) {
        if (cold == 1) flush();
        if (cold == 2) {
          clf(x.data(), x.size() * 2);
          clf(dy.data(), dy.size() * 2);
        }
        auto t0 = std::chrono::steady_clock::now();
        wg.run(x.data(), dy.data(), dw.data());
        auto t1 = std::chrono::steady_clock::now();
        if (r >= 2) t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
      std::sort(t.begin(), t.end());
      const double gf = 2.0 * g.n * oh * ow * g.oc * g.ic * 9 / 1e9;
      double cs = 0;
      for (float v : dw) cs += v;
      std::printf("copy_x %.3f copy_dy %.3f products %.3f ms/run/thread0 | ", amx::g_t[0][0] / 2.6e6 / 11,
                  amx::g_t[1][0] / 2.6e6 / 11, amx::g_t[2][0] / 2.6e6 / 11);
      std::printf("%-16s %s %8.3f ms  %6.0f GFLOP/s  (min %.3f) sum %.6g\n", g.name,
                  cold == 1   ? "cold"
                  : cold == 2 ? "clfl"
                              : "warm",
                  t[t.size() / 2], gf / t[t.size() / 2] * 1e3, t[0], cs);
    }
  }
}
