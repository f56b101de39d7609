// An own fp32 NHWC 3x3 stride-1 pad-1 weight gradient that skips the taps
// on the padding and reads x in place, against oneDNN's backward_weights.
#include <immintrin.h>
#include <omp.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "dnnl.hpp"

// acc[kw][i][q] += x[h+kh-1][w+kw-1][ci0+i] * dy[h][w][g*16Q+16q] for one pixel w.
template <int C, int CI, int Q, int KW0, int KW1>
inline void pixel(const float* __restrict xr, const float* __restrict dr, int w, __m512* acc) {
  __m512 d[Q];
#pragma GCC unroll 8
  for (int q = 0; q < Q; ++q) d[q] = _mm512_loadu_ps(dr + w * C + 16 * q);
#pragma GCC unroll 3
  for (int kw = KW0; kw < KW1; ++kw)
#pragma GCC unroll 16
    for (int i = 0; i < CI; ++i) {
      const __m512 b = _mm512_set1_ps(xr[(w + kw - 1) * C + i]);
#pragma GCC unroll 8
      for (int q = 0; q < Q; ++q)
        acc[(kw * CI + i) * Q + q] = _mm512_fmadd_ps(b, d[q], acc[(kw * CI + i) * Q + q]);
    }
}

template <int C, int CI, int Q>
void wgrad_image(int H, int W, const float* __restrict x, const float* __restrict dy, float* __restrict dw) {
  for (int kh = 0; kh < 3; ++kh)
    for (int ci0 = 0; ci0 < C; ci0 += CI)
      for (int g = 0; g < C / (16 * Q); ++g) {
        __m512 acc[3 * CI * Q];
#pragma GCC unroll 64
        for (int i = 0; i < 3 * CI * Q; ++i) acc[i] = _mm512_setzero_ps();
        const int h0 = kh == 0 ? 1 : 0, h1 = kh == 2 ? H - 1 : H;
        for (int h = h0; h < h1; ++h) {
          const float* xr = x + size_t(h + kh - 1) * W * C + ci0;
          const float* dr = dy + size_t(h) * W * C + g * 16 * Q;
          pixel<C, CI, Q, 1, 3>(xr, dr, 0, acc);
          for (int w = 1; w < W - 1; ++w) pixel<C, CI, Q, 0, 3>(xr, dr, w, acc);
          pixel<C, CI, Q, 0, 2>(xr, dr, W - 1, acc);
        }
        for (int kw = 0; kw < 3; ++kw)
          for (int i = 0; i < CI; ++i)
            for (int q = 0; q < Q; ++q) {
              float* o = dw + ((kh * 3 + kw) * C + ci0 + i) * C + g * 16 * Q + 16 * q;
              _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), acc[(kw * CI + i) * Q + q]));
            }
      }
}

template <int C, int CI, int Q>
void wgrad(int N, int H, int W, const float* x, const float* dy, float* dw) {
  const int nt = omp_get_max_threads();
  std::vector<float> part(size_t(nt) * 9 * C * C, 0.f);
#pragma omp parallel
  {
    float* p = &part[size_t(omp_get_thread_num()) * 9 * C * C];
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n)
      wgrad_image<C, CI, Q>(H, W, x + size_t(n) * H * W * C, dy + size_t(n) * H * W * C, p);
  }
  for (size_t i = 0; i < size_t(9) * C * C; ++i) {
    float s = 0.f;
    for (int t = 0; t < nt; ++t) s += part[size_t(t) * 9 * C * C + i];
    dw[i] = s;
  }
}

// The transposed form: a vector of 16 input channels of x, dy broadcast per
// output channel: acc[kw][j] (16 ci) += x[h+kh-1][w+kw-1][cb*16 ..] * dy[h][w][co0+j].
template <int C, int COB, int KW0, int KW1>
inline void pixel_t(const float* __restrict xr, const float* __restrict dr, int w, __m512* acc) {
  __m512 xv[3];
#pragma GCC unroll 3
  for (int kw = KW0; kw < KW1; ++kw) xv[kw] = _mm512_loadu_ps(xr + (w + kw - 1) * C);
#pragma GCC unroll 16
  for (int j = 0; j < COB; ++j) {
    const __m512 b = _mm512_set1_ps(dr[w * C + j]);
#pragma GCC unroll 3
    for (int kw = KW0; kw < KW1; ++kw) acc[kw * COB + j] = _mm512_fmadd_ps(xv[kw], b, acc[kw * COB + j]);
  }
}
template <int C, int COB>
void wgrad_image_t(int H, int W, const float* __restrict x, const float* __restrict dy,
                   float* __restrict dw) {
  for (int kh = 0; kh < 3; ++kh)
    for (int cb = 0; cb < C / 16; ++cb)
      for (int co0 = 0; co0 < C; co0 += COB) {
        __m512 acc[3 * COB];
#pragma GCC unroll 64
        for (int i = 0; i < 3 * COB; ++i) acc[i] = _mm512_setzero_ps();
        const int h0 = kh == 0 ? 1 : 0, h1 = kh == 2 ? H - 1 : H;
        for (int h = h0; h < h1; ++h) {
          const float* xr = x + size_t(h + kh - 1) * W * C + cb * 16;
          const float* dr = dy + size_t(h) * W * C + co0;
          pixel_t<C, COB, 1, 3>(xr, dr, 0, acc);
          for (int w = 1; w < W - 1; ++w) pixel_t<C, COB, 0, 3>(xr, dr, w, acc);
          pixel_t<C, COB, 0, 2>(xr, dr, W - 1, acc);
        }
        // acc[kw][j] holds dw[kh][kw][cb*16 + 0..15][co0 + j]: scattered into HWIO
        for (int kw = 0; kw < 3; ++kw)
          for (int j = 0; j < COB; ++j) {
            alignas(64) float v[16];
            _mm512_store_ps(v, acc[kw * COB + j]);
            for (int i = 0; i < 16; ++i) dw[((kh * 3 + kw) * C + cb * 16 + i) * C + co0 + j] += v[i];
          }
      }
}
template <int C, int COB>
void wgrad_t(int N, int H, int W, const float* x, const float* dy, float* dw) {
  const int nt = omp_get_max_threads();
  std::vector<float> part(size_t(nt) * 9 * C * C, 0.f);
#pragma omp parallel
  {
    float* p = &part[size_t(omp_get_thread_num()) * 9 * C * C];
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n)
      wgrad_image_t<C, COB>(H, W, x + size_t(n) * H * W * C, dy + size_t(n) * H * W * C, p);
  }
  for (size_t i = 0; i < size_t(9) * C * C; ++i) {
    float s = 0.f;
    for (int t = 0; t < nt; ++t) s += part[size_t(t) * 9 * C * C + i];
    dw[i] = s;
  }
}

using namespace dnnl;
template <int C, int CI, int Q, int T = 0>
void run(int N, int H, int W) {
  const size_t xs = size_t(N) * H * W * C;
  std::vector<float> x(xs), dy(xs), dw(9 * C * C), dwr(9 * C * C);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = std::max(0.f, nd(rng));
  for (auto& v : dy) v = nd(rng);
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  memory::desc sd({N, C, H, W}, memory::data_type::f32, memory::format_tag::nhwc);
  memory::desc wd({C, C, 3, 3}, memory::data_type::f32, memory::format_tag::any);
  memory::desc wu({C, C, 3, 3}, memory::data_type::f32, memory::format_tag::hwio);
  convolution_forward::desc fd(prop_kind::forward_training, algorithm::convolution_direct, sd, wd, sd, {1, 1},
                               {1, 1}, {1, 1});
  convolution_forward::primitive_desc fpd(fd, eng);
  convolution_backward_weights::desc bd(algorithm::convolution_direct, sd, wd, sd, {1, 1}, {1, 1}, {1, 1});
  convolution_backward_weights::primitive_desc bpd(bd, eng, fpd);
  memory xm(sd, eng, x.data()), dym(sd, eng, dy.data()), dwm(bpd.diff_weights_desc(), eng),
      dwu(wu, eng, dwr.data());
  convolution_backward_weights bw(bpd);
  auto t_dnnl = [&] {
    bw.execute(s, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_DIFF_WEIGHTS, dwm}});
    s.wait();
  };
  auto t_own = [&] {
    if constexpr (T > 0)
      wgrad_t<C, T>(N, H, W, x.data(), dy.data(), dw.data());
    else
      wgrad<C, CI, Q>(N, H, W, x.data(), dy.data(), dw.data());
  };
  auto time = [](auto f) {
    std::vector<double> v;
    for (int i = 0; i < 15; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      f();
      v.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  t_dnnl();
  reorder(dwm, dwu).execute(s, dwm, dwu);
  s.wait();
  t_own();
  double err = 0, mx = 0;
  for (size_t i = 0; i < dw.size(); ++i) {
    err = std::max(err, double(std::fabs(dw[i] - dwr[i])));
    mx = std::max(mx, double(std::fabs(dwr[i])));
  }
  double a = time(t_dnnl), b = time(t_own), a2 = time(t_dnnl), b2 = time(t_own);
  a = std::min(a, a2), b = std::min(b, b2);
  printf("C=%d %dx%d CI=%d Q=%d T=%d: onednn wgrad %.3f ms  own %.3f ms  ratio %.3f  maxerr %.1e/%.1f\n", C,
         H, W, CI, Q, T, a * 1e3, b * 1e3, a / b, err, mx);
}
int main() {
  run<16, 4, 1>(128, 32, 32);
  run<16, 0, 0, 8>(128, 32, 32);
  run<16, 0, 0, 4>(128, 32, 32);
  run<32, 0, 0, 8>(128, 16, 16);
  run<64, 0, 0, 8>(128, 8, 8);
  run<32, 4, 2>(128, 16, 16);
  run<64, 2, 4>(128, 8, 8);
  run<64, 4, 2>(128, 8, 8);
  return 0;
}
