// Probe: bn::nhwc_sums<Grad, 16, bf16, bf16> (one float accumulator chain per
// sum, rows one after the other) against the same sums with the rows of a
// block split between two / four accumulators, stage-1 shape (128x32x32x16),
// 2 threads, x and dy evicted before each call (as in the step) or warm.
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "cifarnet/backend/onednn/bn_kernels.hpp"
namespace bn = cifarnet::backend::onednn::bn;
using cifarnet::backend::host::widen;
template <int A>
void sums_multi(std::size_t r0, std::size_t r1, const std::uint16_t* __restrict x,
                const std::uint16_t* __restrict dy, const float* __restrict relu_ab,
                const float* __restrict k, double* s1, double* s2) {
  constexpr std::size_t C = 16;
  double d1[C] = {}, d2[C] = {};
  float kc[C], ka[C], kb[C];
  for (std::size_t c = 0; c < C; ++c) {
    kc[c] = k[c];
    ka[c] = relu_ab[c];
    kb[c] = relu_ab[C + c];
  }
  for (std::size_t rb = r0; rb < r1; rb += bn::kBlockRows) {
    const std::size_t re = std::min(r1, rb + bn::kBlockRows);
    float b1[A][C], b2[A][C];
    for (int a = 0; a < A; ++a)
      for (std::size_t c = 0; c < C; ++c) b1[a][c] = b2[a][c] = 0.f;
    std::size_t r = rb;
    for (; r + A <= re; r += A) {
      bn::ahead(x + r * C);
      bn::ahead(dy + r * C);
      for (int a = 0; a < A; ++a) {
        const std::uint16_t* xr = x + (r + a) * C;
        const std::uint16_t* dr = dy + (r + a) * C;
#pragma omp simd
        for (std::size_t c = 0; c < C; ++c) {
          const float xv = widen(xr[c]);
          const float u = widen(dr[c]) * bn::relu_on(xv, ka[c], kb[c]);
          b1[a][c] += u;
          b2[a][c] += u * (xv - kc[c]);
        }
      }
    }
    for (; r < re; ++r) {
      const std::uint16_t* xr = x + r * C;
      const std::uint16_t* dr = dy + r * C;
      for (std::size_t c = 0; c < C; ++c) {
        const float xv = widen(xr[c]);
        const float u = widen(dr[c]) * bn::relu_on(xv, ka[c], kb[c]);
        b1[0][c] += u;
        b2[0][c] += u * (xv - kc[c]);
      }
    }
    for (int a = 1; a < A; ++a)
      for (std::size_t c = 0; c < C; ++c) {
        b1[0][c] += b1[a][c];
        b2[0][c] += b2[a][c];
      }
    for (std::size_t c = 0; c < C; ++c) {
      d1[c] += double(b1[0][c]);
      d2[c] += double(b2[0][c]);
    }
  }
  for (std::size_t c = 0; c < 16; ++c) {
    s1[c] += d1[c];
    s2[c] += d2[c];
  }
}
int main() {
  const std::size_t rows = 128 * 32 * 32, C = 16;
  std::vector<std::uint16_t> x(rows * C), dy(rows * C);
  std::mt19937 g(1);
  std::normal_distribution<float> d;
  for (auto& v : x) v = cifarnet::backend::host::bf16_bits(d(g));
  for (auto& v : dy) v = cifarnet::backend::host::bf16_bits(d(g));
  std::vector<float> ab(2 * C, 1.f), k(C, 0.f);
  for (std::size_t c = 0; c < C; ++c) ab[C + c] = 0.1f;
  std::vector<char> junk(64 << 20, 1);
  auto run = [&](int which, bool cold) {
    std::vector<double> t;
    double out = 0;
    for (int rep = 0; rep < 21; ++rep) {
      if (cold) {
        for (std::size_t i = 0; i < junk.size(); i += 64) junk[i]++;
      }
      double s[2][2][16] = {};
      auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(2)
      {
        int th = omp_get_thread_num();
        std::size_t r0 = bn::share(rows, th, 2), r1 = bn::share(rows, th + 1, 2);
        if (which == 1)
          bn::nhwc_sums<bn::SumKind::Grad, 16, std::uint16_t, std::uint16_t>(
              r0, r1, x.data(), dy.data(), ab.data(), k.data(), s[th][0], s[th][1], nullptr);
        else if (which == 2)
          sums_multi<2>(r0, r1, x.data(), dy.data(), ab.data(), k.data(), s[th][0], s[th][1]);
        else
          sums_multi<4>(r0, r1, x.data(), dy.data(), ab.data(), k.data(), s[th][0], s[th][1]);
      }
      auto t1 = std::chrono::steady_clock::now();
      t.push_back(std::chrono::duration<double>(t1 - t0).count() * 1e3);
      out = s[0][0][0] + s[1][0][0] + s[0][1][3];
    }
    std::sort(t.begin(), t.end());
    std::printf("  %s accumulators %d: %.3f ms (median of 21), %.1f GB/s   [check %.6f]\n",
                cold ? "cold" : "warm",
                which == 1   ? 1
                : which == 2 ? 2
                             : 4,
                t[10], 2.0 * rows * C * 2 / t[10] / 1e6, out);
  };
  for (int round = 0; round < 2; ++round)
    for (bool cold : {true, false})
      for (int w : {1, 2, 3}) run(w, cold);
}
