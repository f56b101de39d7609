// The AMX weight gradient's copies against its whole run, ResNet-20's and
// airbench94's geometries, 2 threads: ms per run (median of 9 after 2).
#include <omp.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <sstream>
#include <string>
#include <stdexcept>
#include "cifarnet/core/error.hpp"
#define private public
#include "cifarnet/backend/onednn/amx_wgrad.hpp"
#undef private
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
  for (const G& g : gs) {
    if (*only && !std::strstr(g.name, only)) continue;
    const std::size_t oh = (g.h + 2 - 3) / g.s + 1, ow = (g.w + 2 - 3) / g.s + 1;
    std::vector<std::uint16_t> x(g.n * g.h * g.w * g.ic), dy(g.n * oh * ow * g.oc);
    for (auto& v : x) v = std::uint16_t(0x3f00 | d(rng));
    for (auto& v : dy) v = std::uint16_t(0x3f00 | d(rng));
    std::vector<float> dw(9 * g.ic * g.oc);
    const std::size_t pb = g.s == 2 ? 0 : 1;
    amx::WeightGrad wg(g.n, g.h, g.w, g.ic, g.oc, 3, 3, 1, 1, pb, pb, g.s, g.s);
    std::vector<double> tr, tx, td;
    for (int r = 0; r < 11; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      wg.run(x.data(), dy.data(), dw.data());
      auto t1 = std::chrono::steady_clock::now();
      double cxs[8] = {0}, cds[8] = {0};
#pragma omp parallel
      {
        double& cx = cxs[omp_get_thread_num()];
        double& cd = cds[omp_get_thread_num()];
        auto& s = wg.scratch_[std::size_t(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1)
        for (std::size_t c = 0; c < wg.nchunks_; ++c) {
          const std::size_t b0 = wg.chunk_begin(c), b1 = wg.chunk_begin(c + 1);
          for (std::size_t m0 = b0; m0 < b1; m0 += wg.block_) {
            const std::size_t cnt = std::min(wg.block_, b1 - m0);
            auto a = std::chrono::steady_clock::now();
            for (std::size_t b = 0; b < wg.phases_.size(); ++b)
              wg.copy_x(x.data() + m0 * g.h * g.w * g.ic, cnt, wg.phases_[b], s.xt[b].p);
            auto bb = std::chrono::steady_clock::now();
            wg.copy_dy(dy.data() + m0 * oh * ow * g.oc, cnt, s.dyv);
            auto cc = std::chrono::steady_clock::now();
            cx += std::chrono::duration<double, std::milli>(bb - a).count();
            cd += std::chrono::duration<double, std::milli>(cc - bb).count();
          }
        }
      }
      const double cx = std::max(cxs[0], cxs[1]), cd = std::max(cds[0], cds[1]);
      if (r >= 2) {
        tr.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        tx.push_back(cx);
        td.push_back(cd);
      }
    }
    std::printf(
        "%-16s run %7.3f ms   copy_x %7.3f ms  copy_dy %7.3f ms (per thread, summed over its blocks)  block "
        "%zu images, %zu chunks, plane %zu (%zu pixels)\n",
        g.name, med(tr), med(tx), med(td), wg.block_, wg.nchunks_, wg.plane_, oh * ow);
  }
}
