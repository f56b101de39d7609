#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <algorithm>
#include <omp.h>
#include "cifarnet/backend/onednn/bn_kernels.hpp"
#include "cifarnet/backend/host/mask_bits.hpp"
#include "cifarnet/core/tensor_memory.hpp"
using namespace cifarnet;
namespace on = cifarnet::backend::onednn;
namespace host = cifarnet::backend::host;
static std::vector<float> junk(64u << 20);
template <class F>
double timeit(F&& f, bool cold) {
  std::vector<double> t;
  for (int r = 0; r < 31; ++r) {
    if (cold)
      for (auto& v : junk) v += 1.f;
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[15];
}
// streaming variant: each block of rows formed in a stack buffer, streamed to dy, summed from the buffer
template <std::size_t C>
void streamed(const ChannelGeom& g, const std::uint16_t* a, const std::uint16_t* b, const std::uint16_t* mask,
              std::uint16_t* dy, const std::uint16_t* x, const float* k, on::bn::Scratch& sc) {
  const int nt = std::max(1, omp_get_max_threads());
  sc.part.assign(std::size_t(nt) * 2 * C, 0.0);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), n_threads = omp_get_num_threads();
    double* s1 = sc.part.data() + std::size_t(t) * 2 * C;
    double* s2 = s1 + C;
    const std::size_t rows = g.n * g.h * g.w, r0 = on::bn::share(rows, t, n_threads),
                      r1 = on::bn::share(rows, t + 1, n_threads);
    alignas(64) std::uint16_t buf[on::bn::kBlockRows * C];
    double d1[C], d2[C];
    float kc[C];
    for (std::size_t c = 0; c < C; ++c) d1[c] = d2[c] = 0, kc[c] = k[c];
    for (std::size_t rb = r0; rb < r1; rb += on::bn::kBlockRows) {
      const std::size_t re = std::min(r1, rb + on::bn::kBlockRows);
      for (std::size_t r = rb; r < re; ++r) {
        host::prefetch_ahead(a + r * C);
        host::prefetch_ahead(b + r * C);
        for (std::size_t i = r * C; i < (r + 1) * C; i += 16)
          host::add_masked_word(a + i, b + i, mask[i / 16], buf + (i - rb * C));
      }
      for (std::size_t i = 0; i < (re - rb) * C; i += 16)
        _mm256_stream_si256(reinterpret_cast<__m256i*>(dy + rb * C + i),
                            _mm256_load_si256(reinterpret_cast<const __m256i*>(buf + i)));
      float b1[C], b2[C];
      for (std::size_t c = 0; c < C; ++c) b1[c] = b2[c] = 0.f;
      for (std::size_t r = rb; r < re; ++r) {
        const std::uint16_t* xr = x + r * C;
        host::prefetch_ahead(xr);
        const std::uint16_t* dr = buf + (r - rb) * C;
#pragma omp simd
        for (std::size_t c = 0; c < C; ++c) {
          const float u = host::bf16_to_float(dr[c]);
          b1[c] += u;
          b2[c] += u * (host::bf16_to_float(xr[c]) - kc[c]);
        }
      }
      for (std::size_t c = 0; c < C; ++c) d1[c] += double(b1[c]), d2[c] += double(b2[c]);
    }
    _mm_sfence();
    for (std::size_t c = 0; c < C; ++c) s1[c] += d1[c], s2[c] += d2[c];
  }
}
int main(int argc, char** argv) {
  const std::size_t h = argc > 1 ? std::atoi(argv[1]) : 32;
  constexpr std::size_t C = 16;
  const ChannelGeom g{DataFormat::NHWC, 128, C, h, h};
  const std::size_t n = g.size();
  HostVector<std::uint16_t> a(n), b(n), x(n), dy(n), dy2(n), mask(n / 16), out(n);
  for (std::size_t i = 0; i < n; ++i)
    a[i] = host::bf16_bits(float(i % 7) - 3), b[i] = host::bf16_bits(float(i % 5) - 2),
    x[i] = host::bf16_bits(float(i % 11) * 0.1f);
  for (std::size_t i = 0; i < n / 16; ++i) mask[i] = std::uint16_t(i * 2654435761u);
  std::vector<float> k(C, 0.3f);
  on::bn::Scratch sc;
  auto consumer = [&](const std::uint16_t* d) {  // as input_gradient: read dy and x, write out (warm scratch)
#pragma omp parallel for
    for (std::size_t i = 0; i < n; i += 16) {
      __m512 v = _mm512_add_ps(host::detail::load16(d + i), host::detail::load16(x.data() + i));
      host::detail::store16(v, out.data() + i);
    }
  };
  for (int cold = 0; cold < 2; ++cold) {
    double lib = timeit(
        [&] {
          on::bn::sum_into_dy_with_sums<C>(g, a.data(), b.data(), mask.data(), dy.data(), x.data(), nullptr,
                                           k.data(), sc);
        },
        cold);
    double str = timeit(
        [&] { streamed<C>(g, a.data(), b.data(), mask.data(), dy2.data(), x.data(), k.data(), sc); }, cold);
    double libc = timeit(
        [&] {
          on::bn::sum_into_dy_with_sums<C>(g, a.data(), b.data(), mask.data(), dy.data(), x.data(), nullptr,
                                           k.data(), sc);
          consumer(dy.data());
        },
        cold);
    double strc = timeit(
        [&] {
          streamed<C>(g, a.data(), b.data(), mask.data(), dy2.data(), x.data(), k.data(), sc);
          consumer(dy2.data());
        },
        cold);
    std::printf("h=%zu %s: library %.3f ms, streamed %.3f ms; with the consumer %.3f / %.3f ms\n", h,
                cold ? "cold" : "warm", lib, str, libc, strc);
  }
  std::printf("same dy: %d\n", std::memcmp(dy.data(), dy2.data(), n * 2) == 0);
}
