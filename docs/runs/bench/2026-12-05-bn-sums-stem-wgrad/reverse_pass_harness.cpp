// A pass of the sums (forward order) then an elementwise pass over the same
// data, forward or in reverse within each thread's share, from cold.
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <omp.h>
#include "cifarnet/backend/onednn/bn_kernels.hpp"
using namespace cifarnet;
namespace on = cifarnet::backend::onednn;
namespace host = cifarnet::backend::host;
static std::vector<float> junk(48u << 20);
template <std::size_t C>
void affine_rows(std::size_t rows, const std::uint16_t* x, const std::uint16_t* r, const float* a,
                 const float* b, std::uint16_t* y, bool rev) {
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::size_t r0 = on::bn::share(rows, t, nt), r1 = on::bn::share(rows, t + 1, nt);
    constexpr std::size_t K = C / 16;
    __m512 av[K], bv[K];
    for (std::size_t k = 0; k < K; ++k) {
      av[k] = _mm512_loadu_ps(a + 16 * k);
      bv[k] = _mm512_loadu_ps(b + 16 * k);
    }
    for (std::size_t i = 0; i < r1 - r0; ++i) {
      const std::size_t q = rev ? r1 - 1 - i : r0 + i;
      const std::size_t base = q * C;
      if (rev)
        __builtin_prefetch(x + base - 512, 0, 3), __builtin_prefetch(r + base - 512, 0, 3);
      else
        host::prefetch_ahead(x + base), host::prefetch_ahead(r + base);
      for (std::size_t k = 0; k < K; ++k) {
        const std::size_t at = base + 16 * k;
        __m512 v = (host::detail::load16(x + at) * av[k] + bv[k]) + host::detail::load16(r + at);
        v = _mm512_max_ps(_mm512_setzero_ps(), v);
        host::detail::store16(v, y + at);
      }
    }
  }
}
int main(int argc, char** argv) {
  const std::size_t n = 128, h = argc > 1 ? std::atoi(argv[1]) : 32;
  const std::size_t C = h == 32 ? 16 : h == 16 ? 32 : 64, px = n * h * h, el = px * C;
  std::vector<std::uint16_t> x(el, 0x3f80), r(el, 0x3f00), y(el);
  std::vector<float> a(C, 1.f), b(C, 0.1f), k(C, 0.f);
  const ChannelGeom cg{DataFormat::NHWC, n, C, h, h};
  on::bn::Scratch sc;
  auto run = [&](auto cc) {
    constexpr std::size_t CC = decltype(cc)::value;
    for (int rev = 0; rev < 2; ++rev) {
      std::vector<double> t1v, t2v;
      for (int it = 0; it < 31; ++it) {
        for (auto& v : junk) v += 1.f;
        auto t0 = std::chrono::steady_clock::now();
        on::bn::channel_sums<on::bn::SumKind::Stats, CC, std::uint16_t, float>(cg, x.data(), nullptr, nullptr,
                                                                               k.data(), sc);
        auto t1 = std::chrono::steady_clock::now();
        affine_rows<CC>(px, x.data(), r.data(), a.data(), b.data(), y.data(), rev);
        auto t2 = std::chrono::steady_clock::now();
        t1v.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        t2v.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
      }
      std::sort(t1v.begin(), t1v.end());
      std::sort(t2v.begin(), t2v.end());
      std::printf("h=%zu %s: sums %.3f ms, then affine %.3f ms\n", h, rev ? "reverse" : "forward", t1v[15],
                  t2v[15]);
    }
  };
  if (C == 16)
    run(std::integral_constant<std::size_t, 16>{});
  else if (C == 32)
    run(std::integral_constant<std::size_t, 32>{});
  else
    run(std::integral_constant<std::size_t, 64>{});
}
