// The probe behind docs/BENCHMARKS.md's prefetch figures (2026-11-27 14:53): batch norm's passes
// (bn_kernels.hpp) on a 128x32x32x16 bf16 tensor, hot and with the caches flushed (COLD=1), beside a
// plain read of the same bytes. Build: g++ -O3 -march=native -fopenmp -DNDEBUG -I<repo>/include
// -I/usr/include/eigen3 bn_passes_probe.cpp (output.txt beside it). Not part of the build.
#include <chrono>
#include <immintrin.h>
#include <cstdio>
#include <vector>
#include <algorithm>
#include "cifarnet/backend/onednn/bn_kernels.hpp"
using namespace cifarnet;
namespace bn = cifarnet::backend::onednn::bn;
static std::vector<float> junk(160u << 20, 1.f);
template <class F>
double tm(F&& f) {
  std::vector<double> v;
  for (int r = 0; r < 15; ++r) {
    if (getenv("COLD")) {
#pragma omp parallel for
      for (size_t i = 0; i < junk.size(); i += 16) junk[i] += 1.f;
    }
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    v.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
template <size_t C>
void run(size_t N, size_t H) {
  ChannelGeom g;
  g.n = N;
  g.c = C;
  g.h = H;
  g.w = H;
  g.fmt = DataFormat::NHWC;
  size_t E = N * C * H * H;
  std::vector<uint16_t> xb(E), yb(E), dxb(E);
  std::vector<float> xf(E), y(E), dy(E), dx(E);
  for (size_t i = 0; i < E; ++i) {
    float v = float((i * 2654435761u) % 1000) / 500.f - 1.f;
    xf[i] = v;
    xb[i] = cifarnet::backend::host::bf16_bits(v);
    dy[i] = v * 0.5f;
  }
  std::vector<float> k(C, 0.1f), a(C, 1.2f), b(C, 0.1f), rab(2 * C, 0.5f), A(C, 1.f), B(C, 0.1f), D(C, 0.01f),
      mean(C, 0.f);
  bn::Scratch sc;
  double t1 =
      tm([&] { bn::channel_sums<bn::SumKind::Stats, C>(g, xb.data(), nullptr, nullptr, k.data(), sc); });
  double t2 = tm([&] { bn::affine<C>(g, xb.data(), a.data(), b.data(), nullptr, true, yb.data()); });
  double t3 =
      tm([&] { bn::channel_sums<bn::SumKind::Grad, C>(g, xb.data(), dy.data(), rab.data(), k.data(), sc); });
  double t4 = tm([&] {
    bn::input_gradient<C>(g, xb.data(), dy.data(), rab.data(), mean.data(), A.data(), B.data(), D.data(),
                          nullptr, dxb.data());
  });
  double t5 =
      tm([&] { bn::affine_sum<C>(g, xb.data(), a.data(), b.data(), xf.data(), true, y.data(), yb.data()); });
  float tot = 0;
  double t0 = tm([&] {
#pragma omp parallel reduction(+ : tot)
    {
      int t = omp_get_thread_num(), T = omp_get_num_threads();
      size_t b0 = E * t / T, e = E * (t + 1) / T;
      __m512 s0 = _mm512_setzero_ps(), s1 = s0;
      for (size_t i = b0; i < e; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps((const float*)&xb[i]));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps((const float*)&xb[i + 32]));
      }
      tot += _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    }
  });
  double MB = E / 1e6;
  printf("plain read of x: %.3f ms (%.0f GB/s) %g\n", t0, 2 * MB / t0, tot);
  printf(
      "C=%zu E=%.1fM: stats %.3f ms (%.0f GB/s) affine-bf16only %.3f (%.0f) gradsums %.3f (%.0f) "
      "input_grad->bf16 %.3f (%.0f) affine_sum %.3f (%.0f)\n",
      C, MB, t1, 2 * MB / t1, t2, 4 * MB / t2, t3, 6 * MB / t3, t4, 8 * MB / t4, t5, 12 * MB / t5);
}
int main() {
  for (int i = 0; i < 2; ++i) {
    run<16>(128, 32);
    run<32>(128, 16);
    run<64>(128, 8);
  }
}
