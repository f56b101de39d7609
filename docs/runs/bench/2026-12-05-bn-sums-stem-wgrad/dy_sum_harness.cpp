#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <algorithm>
#include <omp.h>
#include "cifarnet/backend/onednn/bn_kernels.hpp"
#include "cifarnet/backend/host/mask_bits.hpp"
using namespace cifarnet;
namespace on = cifarnet::backend::onednn;
namespace host = cifarnet::backend::host;
static std::vector<float> junk(48u << 20);
template <class F>
double timeit(F&& f, bool cold) {
  std::vector<double> t;
  for (int r = 0; r < 41; ++r) {
    if (cold)
      for (auto& v : junk) v += 1.f;
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[20];
}
template <std::size_t C>
void add_sums(std::size_t rows, const std::uint16_t* a, const std::uint16_t* b, const std::uint16_t* bits,
              std::uint16_t* y, const std::uint16_t* x, const float* k, double* part) {
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::size_t r0 = on::bn::share(rows, t, nt), r1 = on::bn::share(rows, t + 1, nt);
    constexpr std::size_t K = C / 16;
    __m512 kv[K];
    for (std::size_t j = 0; j < K; ++j) kv[j] = _mm512_loadu_ps(k + 16 * j);
    double d1[C], d2[C];
    for (std::size_t c = 0; c < C; ++c) d1[c] = d2[c] = 0;
    for (std::size_t rb = r0; rb < r1; rb += on::bn::kBlockRows) {
      const std::size_t re = std::min(r1, rb + on::bn::kBlockRows);
      __m512 b1[K], b2[K];
      for (std::size_t j = 0; j < K; ++j) b1[j] = b2[j] = _mm512_setzero_ps();
      for (std::size_t r = rb; r < re; ++r) {
        host::prefetch_ahead(a + r * C);
        host::prefetch_ahead(b + r * C);
        host::prefetch_ahead(x + r * C);
        for (std::size_t j = 0; j < K; ++j) {
          const std::size_t i = r * C + 16 * j;
          __m512 v = _mm512_maskz_add_ps(__mmask16(bits[i / 16]), host::detail::load16(a + i),
                                         host::detail::load16(b + i));
          host::detail::store16(v, y + i);
          const __m512 u = host::detail::load16(y + i);  // the rounded value
          const __m512 xv = _mm512_sub_ps(host::detail::load16(x + i), kv[j]);
          b1[j] = _mm512_add_ps(b1[j], u);
          b2[j] = _mm512_add_ps(b2[j], _mm512_mul_ps(u, xv));
        }
      }
      alignas(64) float f1[C], f2[C];
      for (std::size_t j = 0; j < K; ++j) {
        _mm512_store_ps(f1 + 16 * j, b1[j]);
        _mm512_store_ps(f2 + 16 * j, b2[j]);
      }
      for (std::size_t c = 0; c < C; ++c) {
        d1[c] += f1[c];
        d2[c] += f2[c];
      }
    }
    for (std::size_t c = 0; c < C; ++c) {
      part[t * 2 * C + c] = d1[c];
      part[t * 2 * C + C + c] = d2[c];
    }
  }
}
int main(int argc, char** argv) {
  const std::size_t n = 128, h = argc > 1 ? std::atoi(argv[1]) : 32;
  const std::size_t C = h == 32 ? 16 : h == 16 ? 32 : 64, px = n * h * h, el = px * C;
  std::vector<std::uint16_t> x(el, 0x3f80), a(el, 0x3f00), bb(el, 0x3e00), yb(el), mask(el / 16, 0xA5A5);
  std::vector<float> k(C, 0.f);
  std::vector<double> part(4 * C);
  const ChannelGeom cg{DataFormat::NHWC, n, C, h, h};
  on::bn::Scratch sc;
  auto run = [&](auto cc) {
    constexpr std::size_t CC = decltype(cc)::value;
    auto sep = [&] {
#pragma omp parallel for schedule(static)
      for (long c = 0; c < long(el / 16384); ++c)
        for (std::size_t i0 = c * 16384; i0 < (c + 1) * 16384; i0 += 16) {
          host::prefetch_ahead(a.data() + i0);
          host::prefetch_ahead(bb.data() + i0);
          host::add_masked_word(a.data() + i0, bb.data() + i0, mask[i0 / 16], yb.data() + i0);
        }
      on::bn::channel_sums<on::bn::SumKind::Grad, CC, std::uint16_t, std::uint16_t>(cg, x.data(), yb.data(),
                                                                                    nullptr, k.data(), sc);
    };
    auto fused = [&] {
      add_sums<CC>(px, a.data(), bb.data(), mask.data(), yb.data(), x.data(), k.data(), part.data());
    };
    on::bn::Scratch sc2;
    auto lib = [&] {
      on::bn::sum_into_dy_with_sums<CC>(cg, a.data(), bb.data(), mask.data(), yb.data(), x.data(), nullptr,
                                        k.data(), sc2);
    };
    for (int cold = 0; cold < 2; ++cold)
      std::printf("h=%zu %s: library fused %.3f ms\n", h, cold ? "cold" : "warm", timeit(lib, cold));
    for (int cold = 0; cold < 2; ++cold) {
      double s = timeit(sep, cold), f = timeit(fused, cold);
      std::printf("h=%zu %s: separate %.3f ms, fused %.3f ms\n", h, cold ? "cold" : "warm", s, f);
    }
    fused();
    sep();
    double m = 0;
    for (std::size_t c = 0; c < 2 * C; ++c)
      m = std::max(m, std::abs(sc.sums[c] - (part[c] + part[2 * C + c])));
    std::printf("max diff %g\n", m);
  };
  if (C == 16)
    run(std::integral_constant<std::size_t, 16>{});
  else if (C == 32)
    run(std::integral_constant<std::size_t, 32>{});
  else
    run(std::integral_constant<std::size_t, 64>{});
}
