// The AMX weight gradient with and without the fetch ahead, ResNet-20's and
// airbench94's geometries, 2 threads: ms per run (median of 9 after 2, the
// two settings alternated call by call), and whether the bits agree.
#include <omp.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "cifarnet/backend/onednn/amx_wgrad.hpp"
using namespace cifarnet::backend::onednn;
struct G {
  const char* name;
  std::size_t n, h, w, ic, oc, s;
};
int main(int argc, char** argv) {
  std::vector<G> gs = {
      {"rn 16->16 @32", 128, 32, 32, 16, 16, 1},  {"rn 32->32 @16", 128, 16, 16, 32, 32, 1},
      {"rn 64->64 @8", 128, 8, 8, 64, 64, 1},     {"rn 16->32 s2", 128, 32, 32, 16, 32, 2},
      {"rn 32->64 s2", 128, 16, 16, 32, 64, 2},   {"ab 24->64 @31", 500, 31, 31, 24, 64, 1},
      {"ab 64->64 @15", 500, 15, 15, 64, 64, 1},  {"ab 64->256 @15", 500, 15, 15, 64, 256, 1},
      {"ab 256->256 @7", 500, 7, 7, 256, 256, 1}, {"ab 256->256 @3", 500, 3, 3, 256, 256, 1}};
  const char* only = argc > 1 ? argv[1] : "";
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> d(0, 255);
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("threads %d\n", omp_get_max_threads());
  for (const G& g : gs) {
    if (*only && !std::strstr(g.name, only)) continue;
    const std::size_t oh = (g.h + 2 - 3) / g.s + 1, ow = (g.w + 2 - 3) / g.s + 1;
    std::vector<std::uint16_t> x(g.n * g.h * g.w * g.ic), dy(g.n * oh * ow * g.oc);
    for (auto& v : x) v = std::uint16_t(0x3f00 | d(rng));
    for (auto& v : dy) v = std::uint16_t(0x3f00 | d(rng));
    std::vector<float> dw0(9 * g.ic * g.oc), dw1(dw0.size());
    // Another buffer written between calls, so x and dy leave the caches as
    // they do in a training step (other layers run between).
    std::vector<float> other(std::size_t(64) << 20);
    const std::size_t pb = g.s == 2 ? 0 : 1;
    amx::WeightGrad wg(g.n, g.h, g.w, g.ic, g.oc, 3, 3, 1, 1, pb, pb, g.s, g.s);
    const bool choice = wg.fetches_ahead();
    std::vector<double> t0s, t1s;
    for (int r = 0; r < 11; ++r)
      for (int on = 0; on < 2; ++on) {
#pragma omp parallel for
        for (std::size_t i = 0; i < other.size(); i += 16) other[i] = float(r);
        wg.set_fetch_ahead(on);
        auto t0 = std::chrono::steady_clock::now();
        wg.run(x.data(), dy.data(), on ? dw1.data() : dw0.data());
        auto t1 = std::chrono::steady_clock::now();
        if (r >= 2) (on ? t1s : t0s).push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    const bool same = std::memcmp(dw0.data(), dw1.data(), dw0.size() * 4) == 0;
    std::printf("%-16s without %7.3f ms  with %7.3f ms  %.3fx  bits %s  (the constructor's choice: %s)\n",
                g.name, med(t0s), med(t1s), med(t0s) / med(t1s), same ? "same" : "DIFFER",
                choice ? "with" : "without");
  }
}
