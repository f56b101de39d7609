// The AMX weight-gradient kernel alone: ms per WeightGrad::run (median of 7
// after 2) on random bf16 data in [0.5, 1), at airbench94's geometries
// (batch 500) and ResNet-20's (batch 128), 3x3 kernels, padding 1 (stride
// 2: padding 1 before, 0 after). A probe for docs/BENCHMARKS.md
// (2026-12-04), built by run.sh beside it; not part of the build.
#include <cstring>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <algorithm>
#include "amx_wgrad_new.hpp"
using namespace cifarnet::backend::onednn;
struct G {
  const char* name;
  std::size_t n, h, w, ic, oc, s;
};
int main(int argc, char** argv) {
  std::vector<G> gs = {
      {"ab 24->64 @31", 500, 31, 31, 24, 64, 1},   {"ab 64->64 @15", 500, 15, 15, 64, 64, 1},
      {"ab 64->256 @15", 500, 15, 15, 64, 256, 1}, {"ab 256->256 @7", 500, 7, 7, 256, 256, 1},
      {"ab 256->256 @3", 500, 3, 3, 256, 256, 1},  {"rn 16->16 @32", 128, 32, 32, 16, 16, 1},
      {"rn 32->32 @16", 128, 16, 16, 32, 32, 1},   {"rn 64->64 @8", 128, 8, 8, 64, 64, 1},
      {"rn 16->32 s2", 128, 32, 32, 16, 32, 2},    {"rn 32->64 s2", 128, 16, 16, 32, 64, 2}};
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
    const std::size_t pb = g.s == 2 ? 0 : 1;
    if (!amxexp::WeightGrad::supported(g.n, g.h, g.w, g.ic, g.oc, 3, 3, 1, 1, pb, pb, g.s, g.s)) {
      std::printf("%-16s not supported by this version\n", g.name);
      continue;
    }
    amxexp::WeightGrad wg(g.n, g.h, g.w, g.ic, g.oc, 3, 3, 1, 1, pb, pb, g.s, g.s);
    std::vector<double> t;
    for (int r = 0; r < 9; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      wg.run(x.data(), dy.data(), dw.data());
      auto t1 = std::chrono::steady_clock::now();
      if (r >= 2) t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(t.begin(), t.end());
    const double gf = 2.0 * g.n * oh * ow * g.oc * g.ic * 9 / 1e9;
    double cs = 0;
    for (float v : dw) cs += v;
    std::printf("%-16s %8.3f ms  %6.0f GFLOP/s  (min %.3f) sum %.6g\n", g.name, t[t.size() / 2],
                gf / t[t.size() / 2] * 1e3, t[0], cs);
  }
}
