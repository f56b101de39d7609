#include <immintrin.h>
#include <omp.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "dnnl.hpp"

// y[n][h][w][co] = sum xp * w[kh][kw][ci][co], NHWC, 3x3 stride 1 pad 1.
template <int C, int R, int P, int Q>
void conv_image(int H, int W, const float* __restrict xp, const float* __restrict w, float* __restrict y) {
  const int WP = W + 2;
  for (int h = 0; h < H; h += R)
    for (int w0 = 0; w0 < W; w0 += P)
      for (int g = 0; g < C / (16 * Q); ++g) {
        __m512 acc[R * P * Q];
#pragma GCC unroll 64
        for (int i = 0; i < R * P * Q; ++i) acc[i] = _mm512_setzero_ps();
        for (int kh = 0; kh < 3; ++kh)
          for (int kw = 0; kw < 3; ++kw) {
            const float* xr = xp + ((h + kh) * WP + w0 + kw) * C;
            const float* wt = w + (kh * 3 + kw) * C * C + g * 16 * Q;
#pragma GCC unroll 4
            for (int ci = 0; ci < C; ++ci) {
              __m512 wv[Q];
#pragma GCC unroll 8
              for (int q = 0; q < Q; ++q) wv[q] = _mm512_loadu_ps(wt + ci * C + 16 * q);
#pragma GCC unroll 8
              for (int r = 0; r < R; ++r)
#pragma GCC unroll 32
                for (int p = 0; p < P; ++p) {
                  const __m512 b = _mm512_set1_ps(xr[(r * WP + p) * C + ci]);
#pragma GCC unroll 8
                  for (int q = 0; q < Q; ++q)
                    acc[(r * P + p) * Q + q] = _mm512_fmadd_ps(b, wv[q], acc[(r * P + p) * Q + q]);
                }
            }
          }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 32
          for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
            for (int q = 0; q < Q; ++q)
              _mm512_storeu_ps(y + ((h + r) * W + w0 + p) * C + g * 16 * Q + 16 * q,
                               acc[(r * P + p) * Q + q]);
      }
}

template <int C, int R, int P, int Q>
void conv(int N, int H, int W, const float* x, const float* w, float* y) {
#pragma omp parallel
  {
    std::vector<float> xp(size_t(H + 2) * (W + 2) * C, 0.f);
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* xi = x + size_t(n) * H * W * C;
      for (int h = 0; h < H; ++h)
        std::memcpy(&xp[((h + 1) * (W + 2) + 1) * C], xi + size_t(h) * W * C, sizeof(float) * W * C);
      conv_image<C, R, P, Q>(H, W, xp.data(), w, y + size_t(n) * H * W * C);
    }
  }
}

using namespace dnnl;
template <int C, int R, int P, int Q>
void run(int N, int H, int W) {
  const size_t xs = size_t(N) * H * W * C;
  std::vector<float> x(xs), wt(9 * C * C), y(xs), yr(xs);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  for (auto& v : wt) v = nd(rng) * 0.1f;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  memory::desc sd({N, C, H, W}, memory::data_type::f32, memory::format_tag::nhwc);
  memory::desc wd({C, C, 3, 3}, memory::data_type::f32, memory::format_tag::any);
  memory::desc wu({C, C, 3, 3}, memory::data_type::f32, memory::format_tag::hwio);
  convolution_forward::desc d(prop_kind::forward_training, algorithm::convolution_direct, sd, wd, sd, {1, 1},
                              {1, 1}, {1, 1});
  convolution_forward::primitive_desc pd(d, eng);
  memory xm(sd, eng, x.data()), ym(sd, eng, yr.data()), wum(wu, eng, wt.data()), wm(pd.weights_desc(), eng);
  reorder(wum, wm).execute(s, wum, wm);
  convolution_forward cf(pd);
  auto t_dnnl = [&] {
    cf.execute(s, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
    s.wait();
  };
  auto t_own = [&] { conv<C, R, P, Q>(N, H, W, x.data(), wt.data(), y.data()); };
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
  t_own();
  double err = 0, mx = 0;
  for (size_t i = 0; i < xs; ++i) {
    err = std::max(err, double(std::fabs(y[i] - yr[i])));
    mx = std::max(mx, double(std::fabs(yr[i])));
  }
  double a = time(t_dnnl), b = time(t_own), b2 = time(t_dnnl), a2 = time(t_own);
  double fl = 2.0 * N * H * W * C * C * 9;
  printf(
      "C=%d %dx%d R=%d P=%d Q=%d impl=%s: onednn %.3f ms (%.0f GF/s)  own %.3f ms (%.0f GF/s)  ratio %.2f  "
      "maxerr %.2e/%.1f\n",
      C, H, W, R, P, Q, pd.impl_info_str(), std::min(a, b2) * 1e3, fl / std::min(a, b2) / 1e9,
      std::min(b, a2) * 1e3, fl / std::min(b, a2) / 1e9, std::min(a, b2) / std::min(b, a2), err, mx);
}
int main() {
  run<16, 1, 16, 1>(128, 32, 32);
  run<16, 1, 8, 1>(128, 32, 32);
  run<16, 2, 8, 1>(128, 32, 32);
  run<16, 1, 32, 1>(128, 32, 32);
  run<32, 1, 8, 2>(128, 16, 16);
  run<32, 1, 16, 1>(128, 16, 16);
  run<32, 2, 8, 1>(128, 16, 16);
  run<64, 1, 8, 2>(128, 8, 8);
  run<64, 1, 4, 4>(128, 8, 8);
  run<64, 2, 8, 1>(128, 8, 8);
}
