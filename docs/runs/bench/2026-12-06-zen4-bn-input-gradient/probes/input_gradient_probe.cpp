#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <random>
#include "cifarnet/backend/onednn/bn_kernels.hpp"
using namespace cifarnet;
namespace bn = cifarnet::backend::onednn::bn;

namespace hd = cifarnet::backend::host::detail;
// variant: explicit AVX-512, K = CC/16 vectors per row; expression variants
template <std::size_t CC, int V>
void ig2(const ChannelGeom& g, const std::uint16_t* __restrict x, const std::uint16_t* dy,
         const float* relu_ab, const float* mean, const float* A, const float* B, const float* D,
         std::uint16_t* __restrict dxb) {
  constexpr std::size_t K = CC / 16;
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::size_t rows = g.n * g.h * g.w, r0 = bn::share(rows, t, nt), r1 = bn::share(rows, t + 1, nt);
    __m512 a[K], b[K], d[K], m[K], ra[K], rb[K];
    for (std::size_t k = 0; k < K; ++k) {
      a[k] = _mm512_loadu_ps(A + 16 * k);
      b[k] = _mm512_loadu_ps(B + 16 * k);
      d[k] = _mm512_loadu_ps(D + 16 * k);
      m[k] = _mm512_loadu_ps(mean + 16 * k);
      ra[k] = relu_ab ? _mm512_loadu_ps(relu_ab + 16 * k) : _mm512_setzero_ps();
      rb[k] = relu_ab ? _mm512_loadu_ps(relu_ab + CC + 16 * k) : _mm512_setzero_ps();
    }
    const __m512 zero = _mm512_setzero_ps();
    for (std::size_t r = r0; r < r1; ++r) {
      bn::ahead(x + r * CC);
      bn::ahead(dy + r * CC);
      for (std::size_t k = 0; k < K; ++k) {
        const std::size_t at = r * CC + 16 * k;
        const __m512 xv = hd::load16(x + at);
        __m512 dv = hd::load16(dy + at);
        if (relu_ab) {
          const __mmask16 on = _mm512_cmp_ps_mask(_mm512_fmadd_ps(xv, ra[k], rb[k]), zero, _CMP_GT_OQ);
          dv = _mm512_mul_ps(dv, _mm512_maskz_mov_ps(on, _mm512_set1_ps(1.f)));
        }
        __m512 o;
        if (V == 0)
          o = _mm512_add_ps(_mm512_fmadd_ps(a[k], dv, _mm512_mul_ps(b[k], _mm512_sub_ps(xv, m[k]))), d[k]);
        else
          o = _mm512_add_ps(_mm512_fmadd_ps(b[k], _mm512_sub_ps(xv, m[k]), _mm512_mul_ps(a[k], dv)), d[k]);
        hd::store16(o, dxb + at);
      }
    }
  }
}
template <std::size_t CC>
void run(std::size_t n, std::size_t hw, bool relu) {
  ChannelGeom g{DataFormat::NHWC, n, CC, hw, hw};
  const std::size_t N = g.size();
  std::vector<std::uint16_t> x(N), dy(N), dx(N);
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  for (std::size_t i = 0; i < N; ++i) {
    x[i] = backend::host::bf16_bits(d(rng));
    dy[i] = backend::host::bf16_bits(d(rng));
  }
  std::vector<float> A(CC), B(CC), D(CC), m(CC), ab(2 * CC);
  for (auto* v : {&A, &B, &D, &m})
    for (auto& e : *v) e = d(rng);
  for (auto& e : ab) e = d(rng);
  std::vector<double> t;
  for (int r = 0; r < 30; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    bn::input_gradient<CC>(g, x.data(), dy.data(), relu ? ab.data() : nullptr, m.data(), A.data(), B.data(),
                           D.data(), nullptr, dx.data());
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  for (int V = 0; V < 2; ++V) {
    std::vector<double> t2;
    std::vector<std::uint16_t> dx2(N);
    for (int r = 0; r < 30; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      if (V == 0)
        ig2<CC, 0>(g, x.data(), dy.data(), relu ? ab.data() : nullptr, m.data(), A.data(), B.data(), D.data(),
                   dx2.data());
      else
        ig2<CC, 1>(g, x.data(), dy.data(), relu ? ab.data() : nullptr, m.data(), A.data(), B.data(), D.data(),
                   dx2.data());
      t2.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t2.begin(), t2.end());
    std::printf("   V%d median %.3f ms  same bits: %d\n", V, t2[15], int(dx2 == dx));
  }
  std::uint64_t h = 0;
  for (auto v : dx) h = h * 1000003u + v;
  std::printf("C=%zu n=%zu hw=%zu relu=%d median %.3f ms min %.3f  %.1f GB/s  hash %016llx\n", CC, n, hw,
              relu, t[15], t[0], 3.0 * 2 * N / t[15] / 1e6, (unsigned long long)h);
}
int main() {
  for (int rep = 0; rep < 2; ++rep) {
    run<16>(128, 32, true);
    run<16>(128, 32, false);
    run<32>(128, 16, true);
    run<32>(128, 16, false);
    run<64>(128, 8, true);
    run<64>(128, 8, false);
  }
}
