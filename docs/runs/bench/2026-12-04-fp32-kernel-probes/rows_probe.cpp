// Probe: the forward tile over R rows against tile<> (one row), one thread.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "cifarnet/backend/onednn/direct_conv.hpp"
using namespace cifarnet::backend::onednn::direct::kernels;
using Fn = void (*)(int, int, const float*, const float*, float*,
                    const cifarnet::backend::onednn::direct::StoreEpilogue*);
template <int C>
void run(int H, const char* name0, Fn f0, std::vector<std::pair<const char*, Fn>> fs) {
  const int W = H, N = 64;
  std::mt19937 g(1);
  std::normal_distribution<float> d;
  std::vector<float> x(std::size_t(N) * H * W * C), w(9 * C * C), y0(x.size()), y1(x.size());
  for (auto& v : x) v = d(g);
  for (auto& v : w) v = d(g);
  auto time = [&](Fn f, std::vector<float>& y) {
    double best = 1e30;
    for (int rep = 0; rep < 15; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (int n = 0; n < N; ++n)
        f(H, W, x.data() + std::size_t(n) * H * W * C, w.data(), y.data() + std::size_t(n) * H * W * C,
          nullptr);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
    }
    return best;
  };
  const double flop = 2.0 * N * H * W * C * C * 9;
  double t0 = time(f0, y0);
  std::printf("C=%d %dx%d %-28s %.3f ms %.1f GFLOP/s\n", C, H, W, name0, t0 * 1e3, flop / t0 * 1e-9);
  for (auto& [nm, f] : fs) {
    double t = time(f, y1);
    bool same = std::memcmp(y0.data(), y1.data(), y0.size() * 4) == 0;
    std::printf("C=%d %dx%d %-28s %.3f ms %.1f GFLOP/s  %.3fx  bits %s\n", C, H, W, nm, t * 1e3,
                flop / t * 1e-9, t0 / t, same ? "same" : "DIFFER");
  }
}
int main() {
  using namespace avx512;
  for (int k = 0; k < 2; ++k) {
    run<16>(32, "tile P16 Q1", &forward_image<16, 16, 1, false>,
            {{"rows P8 Q1 R2", &forward_image_rows<16, 8, 1, 2>},
             {"rows P8 Q1 R3", &forward_image_rows<16, 8, 1, 3>},
             {"rows P4 Q1 R4", &forward_image_rows<16, 4, 1, 4>},
             {"rows P4 Q1 R6", &forward_image_rows<16, 4, 1, 6>},
             {"rows P16 Q1 R1x", &forward_image<16, 16, 1, false>}});
    run<32>(16, "tile P8 Q2", &forward_image<32, 8, 2, false>,
            {{"rows P4 Q2 R2", &forward_image_rows<32, 4, 2, 2>},
             {"rows P4 Q2 R3", &forward_image_rows<32, 4, 2, 3>},
             {"rows P8 Q1 R2", &forward_image_rows<32, 8, 1, 2>},
             {"rows P8 Q1 R3", &forward_image_rows<32, 8, 1, 3>}});
    run<64>(8, "tile P8 Q2", &forward_image<64, 8, 2, false>,
            {{"rows P4 Q2 R2", &forward_image_rows<64, 4, 2, 2>},
             {"rows P4 Q2 R3", &forward_image_rows<64, 4, 2, 3>},
             {"rows P8 Q1 R2", &forward_image_rows<64, 8, 1, 2>},
             {"rows P8 Q1 R3", &forward_image_rows<64, 8, 1, 3>},
             {"rows P8 Q2 R2 (tails)", &forward_image_rows<64, 8, 2, 2>}});
  }
}
