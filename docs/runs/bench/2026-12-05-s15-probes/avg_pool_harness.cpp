// avg_pool::forward of ResNet's two shortcut pools at batch 128 (16 channels at
// 32x32 and 32 at 16x16, 2x2 windows, bf16 in, written into every other
// half of a channel-padded float output), warm and evicted: medians of 15
// calls. The patched kernel prefetches each output row's input rows PF bytes
// ahead when PF is set.
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cstdint>
#include "cifarnet/backend/onednn/avg_pool_kernels.hpp"
using namespace cifarnet;
static std::vector<float> junk(32u << 20);
int main() {
  for (int st = 0; st < 2; ++st) {
    ConvGeom g{};
    g.fmt = DataFormat::NHWC;
    g.n = 128;
    g.ih = g.iw = st ? 16 : 32;
    g.ic = st ? 32 : 16;
    g.oc = g.ic;
    g.kh = g.kw = 2;
    g.sh = g.sw = 2;
    g.oh = g.ow = g.ih / 2;
    std::vector<std::uint16_t> x(g.n * g.ih * g.iw * g.ic, 0x3f80);
    std::vector<float> y(g.n * g.oh * g.ow * g.ic * 2);
    for (int cold = 0; cold < 2; ++cold) {
      std::vector<double> t;
      for (int r = 0; r < 15; ++r) {
        if (cold) {
          for (auto& v : junk) v += 1.f;
        }
        auto t0 = std::chrono::steady_clock::now();
        backend::onednn::avg_pool::forward(g, x.data(), y.data(), 2 * g.ic);
        auto t1 = std::chrono::steady_clock::now();
        t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
      std::sort(t.begin(), t.end());
      std::printf("stage %d %s: %.3f ms\n", st + 2, cold ? "cold" : "warm", t[7]);
    }
  }
}
