// Probe: the own Winograd F(4x4,3x3) forward with AVX-512 bodies (the
// shared transforms of winograd_kernels.hpp at 16 floats, and a GEMM of
// R tiles x one 16-channel panel) against the own direct AVX-512 forward
// and the AVX2 Winograd, ResNet's stage shapes, batch 128, 2 threads.
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include "cifarnet/backend/onednn/winograd.hpp"
namespace cifarnet {
namespace backend {
namespace onednn {
namespace winograd {
namespace kernels {
namespace avx512 {
#define CIFARNET_WK __attribute__((target("avx512f")))
using Vec = direct::kernels::avx512::Vec;
#include "cifarnet/backend/onednn/winograd_kernels.hpp"
template <int R>
CIFARNET_WK inline void gemm16(std::size_t K, const float* __restrict A, std::size_t lda,
                               const float* __restrict B, float* __restrict C, std::size_t ldc) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (std::size_t k = 0; k < K; ++k) {
    const __m512 b = _mm512_loadu_ps(B + k * 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(A[std::size_t(r) * lda + k]), b, acc[r]);
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(C + std::size_t(r) * ldc, acc[r]);
}
template <int R>
CIFARNET_WK void panel16(std::size_t S, std::size_t ci, std::size_t co, const float* Vk, const float* panel,
                         float* Mk, std::size_t cb) {
  float* out = Mk + cb * 16;
  std::size_t t = 0;
  for (; t + R <= S; t += R) gemm16<R>(ci, Vk + t * ci, ci, panel, out + t * co, co);
  for (; t < S; ++t) gemm16<1>(ci, Vk + t * ci, ci, panel, out + t * co, co);
}
#undef CIFARNET_WK
}  // namespace avx512
}  // namespace kernels
}  // namespace winograd
}  // namespace onednn
}  // namespace backend
}  // namespace cifarnet
namespace dk = cifarnet::backend::onednn::direct::kernels;
namespace wg = cifarnet::backend::onednn::winograd;
template <int R>
void run512(const wg::Plan& p, const float* x, const float* U, float* work, float* y) {
  namespace k = wg::kernels::avx512;
  const std::size_t T = p.tiles(), S = wg::Conv3x3::block_tiles(p.ci, p.co, T), panels = p.co / 16;
  float* V = work;
  float* M = work + 36 * S * p.ci;
#pragma omp parallel
  for (std::size_t base = 0; base < T; base += S) {
    const std::size_t s = std::min(S, T - base);
#pragma omp for schedule(static)
    for (std::ptrdiff_t t = 0; t < std::ptrdiff_t(s); ++t)
      k::input_tiles(p, x, base, base + std::size_t(t), base + std::size_t(t) + 1, S, V);
#pragma omp for schedule(static)
    for (std::ptrdiff_t item = 0; item < std::ptrdiff_t(36 * panels); ++item) {
      const std::size_t pos = std::size_t(item) / panels, cb = std::size_t(item) % panels;
      k::panel16<R>(s, p.ci, p.co, V + pos * S * p.ci, U + (pos * panels + cb) * p.ci * 16,
                    M + pos * S * p.co, cb);
    }
#pragma omp for schedule(static)
    for (std::ptrdiff_t t = 0; t < std::ptrdiff_t(s); ++t)
      k::output_tiles(p, M, base, base + std::size_t(t), base + std::size_t(t) + 1, S, nullptr, nullptr,
                      false, y);
  }
}
template <int C>
void run(int H) {
  const int W = H, N = 128;
  std::mt19937 g(1);
  std::normal_distribution<float> d;
  const std::size_t img = std::size_t(H) * W * C;
  std::vector<float> x(N * img), w(9 * C * C), y0(x.size()), y1(x.size()), y2(x.size());
  for (auto& v : x) v = d(g);
  for (auto& v : w) v = d(g);
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> td, tw, t5;
  wg::Conv3x3 conv;
  conv.set_weights(w.data(), 1, C, C);
  std::vector<float> U(36 * C * C);
  wg::transform_weights(w.data(), C, C, U.data());
  wg::Plan p;
  p.n = N;
  p.h = H;
  p.w = W;
  p.ci = C;
  p.co = C;
  p.th = (H + 3) / 4;
  p.tw = (W + 3) / 4;
  std::vector<float> work(wg::Conv3x3::work_floats(C, C, p.tiles()) + 64);
  for (int rep = 0; rep < 11; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n)
      dk::Avx512::forward<C>(H, W, x.data() + n * img, w.data(), y0.data() + n * img);
    auto t1 = std::chrono::steady_clock::now();
    conv.run(N, H, W, x.data(), nullptr, false, y1.data());
    auto t2 = std::chrono::steady_clock::now();
    run512<12>(p, x.data(), U.data(), work.data(), y2.data());
    auto t3 = std::chrono::steady_clock::now();
    td.push_back(std::chrono::duration<double>(t1 - t0).count());
    tw.push_back(std::chrono::duration<double>(t2 - t1).count());
    t5.push_back(std::chrono::duration<double>(t3 - t2).count());
  }
  double err = 0, mx = 0;
  for (std::size_t i = 0; i < y0.size(); ++i) {
    err = std::max(err, double(std::abs(y0[i] - y2[i])));
    mx = std::max(mx, double(std::abs(y0[i])));
  }
  std::printf(
      "%2d ch %2dx%-2d batch %d: direct AVX-512 %.3f ms, Winograd AVX2 %.3f ms (%.2fx), Winograd AVX-512 "
      "%.3f ms (%.2fx), max |diff| %.2e of max |y| %.2e\n",
      C, H, W, N, med(td) * 1e3, med(tw) * 1e3, med(td) / med(tw), med(t5) * 1e3, med(td) / med(t5), err, mx);
}
int main() {
  std::printf("threads %d\n", omp_get_max_threads());
  for (int k = 0; k < 2; ++k) {
    run<16>(32);
    run<32>(16);
    run<64>(8);
  }
}
