// Single-thread rates of the AVX2 weight-gradient kernel's shapes (direct_conv_kernels.hpp at 7bd2e8b), 64
// images, min of 15 runs. Build: g++ -std=c++17 -O3 -march=native -fopenmp -Iinclude -isystem
// /usr/include/eigen3 docs/runs/bench/2026-12-03-avx2-masked-selects/probes/tiles_wgrad.cpp -o /tmp/tw -ldnnl
// && OMP_NUM_THREADS=1 /tmp/tw
#include <cifarnet/backend/onednn/direct_conv.hpp>
#include <chrono>
#include <cstdio>
#include <vector>
using namespace cifarnet::backend::onednn::direct::kernels;
template <class F>
double timeit(F&& f, int reps) {
  f();
  double best = 1e9;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}
template <int C, int P, int Q>
void fwd(int H, int W, int N) {
  std::vector<float> x(size_t(N) * H * W * C, 0.5f), w(9 * C * C, 0.01f), y(x.size());
  double t = timeit(
      [&] {
        for (int i = 0; i < N; ++i)
          avx2::forward_image<C, P, Q>(H, W, x.data() + size_t(i) * H * W * C, w.data(),
                                       y.data() + size_t(i) * H * W * C);
      },
      15);
  printf("fwd  C=%d P=%d Q=%d: %.1f GFLOP/s\n", C, P, Q, 2.0 * N * H * W * 9 * C * C / t * 1e-9);
}
template <int C, int CI, int Q>
void wg(int H, int W, int N) {
  std::vector<float> x(size_t(N) * H * W * C, 0.5f), d(x.size(), 0.25f), dw(9 * C * C, 0.f);
  double t = timeit(
      [&] {
        for (int i = 0; i < N; ++i)
          avx2::wgrad_image<C, CI, Q>(H, W, x.data() + size_t(i) * H * W * C,
                                      d.data() + size_t(i) * H * W * C, dw.data());
      },
      15);
  printf("wgrad C=%d CI=%d Q=%d: %.1f GFLOP/s\n", C, CI, Q, 2.0 * N * H * W * 9 * C * C / t * 1e-9);
}
int main() {
  wg<16, 2, 2>(32, 32, 64);
  wg<16, 4, 1>(32, 32, 64);
  wg<16, 1, 2>(32, 32, 64);
  wg<32, 2, 2>(16, 16, 64);
  wg<32, 1, 4>(16, 16, 64);
  wg<32, 4, 1>(16, 16, 64);
  wg<64, 2, 2>(8, 8, 64);
  wg<64, 1, 4>(8, 8, 64);
  wg<64, 4, 1>(8, 8, 64);
}
