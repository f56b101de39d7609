// An own fp32 NHWC 3x3 stride-1 pad-1 forward that skips the taps falling
// on the padding (rows by the kernel-row range, the edge pixels' columns by
// leaving them out of those taps) and reads the input in place (no padded
// copy), against oneDNN's forward.
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

// Output tile: row h, pixels [w0, w0 + P), channel blocks g*Q .. g*Q+Q-1.
template <int C, int P, int Q, bool Left, bool Right>
inline void tile(int h, int w0, int g, int H, int W, const float* __restrict x, const float* __restrict w,
                 float* __restrict y) {
  __m512 acc[P * Q];
#pragma GCC unroll 64
  for (int i = 0; i < P * Q; ++i) acc[i] = _mm512_setzero_ps();
  const int kh0 = h == 0 ? 1 : 0, kh1 = h == H - 1 ? 2 : 3;
  for (int kh = kh0; kh < kh1; ++kh) {
    const float* xrow = x + size_t(h + kh - 1) * W * C;
#pragma GCC unroll 3
    for (int kw = 0; kw < 3; ++kw) {
      // pixel p reads column w0 + p + kw - 1; skip it where that is padding
      const int p0 = (Left && kw == 0) ? 1 : 0, p1 = (Right && kw == 2) ? P - 1 : P;
      const float* xr = xrow + (w0 + kw - 1) * C;
      const float* wt = w + (kh * 3 + kw) * C * C + g * 16 * Q;
#pragma GCC unroll 4
      for (int ci = 0; ci < C; ++ci) {
        __m512 wv[Q];
#pragma GCC unroll 8
        for (int q = 0; q < Q; ++q) wv[q] = _mm512_loadu_ps(wt + ci * C + 16 * q);
#pragma GCC unroll 32
        for (int p = 0; p < P; ++p) {
          if (p < p0 || p >= p1) continue;
          const __m512 b = _mm512_set1_ps(xr[p * C + ci]);
#pragma GCC unroll 8
          for (int q = 0; q < Q; ++q) acc[p * Q + q] = _mm512_fmadd_ps(b, wv[q], acc[p * Q + q]);
        }
      }
    }
  }
#pragma GCC unroll 32
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
    for (int q = 0; q < Q; ++q)
      _mm512_storeu_ps(y + (size_t(h) * W + w0 + p) * C + g * 16 * Q + 16 * q, acc[p * Q + q]);
}

template <int C, int P, int Q>
void conv_image(int H, int W, const float* x, const float* w, float* y) {
  for (int h = 0; h < H; ++h)
    for (int w0 = 0; w0 < W; w0 += P)
      for (int g = 0; g < C / (16 * Q); ++g) {
        const bool l = w0 == 0, r = w0 + P == W;
        if (l && r)
          tile<C, P, Q, true, true>(h, w0, g, H, W, x, w, y);
        else if (l)
          tile<C, P, Q, true, false>(h, w0, g, H, W, x, w, y);
        else if (r)
          tile<C, P, Q, false, true>(h, w0, g, H, W, x, w, y);
        else
          tile<C, P, Q, false, false>(h, w0, g, H, W, x, w, y);
      }
}

template <int C, int P, int Q>
void conv(int N, int H, int W, const float* x, const float* w, float* y) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n)
    conv_image<C, P, Q>(H, W, x + size_t(n) * H * W * C, w, y + size_t(n) * H * W * C);
}

using namespace dnnl;
template <int C, int P, int Q>
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
  auto t_own = [&] { conv<C, P, Q>(N, H, W, x.data(), wt.data(), y.data()); };
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
  double a = time(t_dnnl), b = time(t_own), a2 = time(t_dnnl), b2 = time(t_own);
  a = std::min(a, a2), b = std::min(b, b2);
  printf("C=%d %dx%d P=%d Q=%d: forward: onednn %.3f ms  own %.3f ms  ratio %.3f  maxerr %.1e/%.1f\n", C, H,
         W, P, Q, a * 1e3, b * 1e3, a / b, err, mx);
  // Backward data: dx = conv of dy (here x's values) with the weights
  // flipped in kh, kw and transposed in (ci, co), through the same kernel.
  std::vector<float> wf(9 * C * C), dx(xs), dxr(xs);
  for (int kh = 0; kh < 3; ++kh)
    for (int kw = 0; kw < 3; ++kw)
      for (int ci = 0; ci < C; ++ci)
        for (int co = 0; co < C; ++co)
          wf[((kh * 3 + kw) * C + co) * C + ci] = wt[(((2 - kh) * 3 + (2 - kw)) * C + ci) * C + co];
  convolution_backward_data::desc bdd(algorithm::convolution_direct, sd, wd, sd, {1, 1}, {1, 1}, {1, 1});
  convolution_backward_data::primitive_desc bpd(bdd, eng, pd);
  memory wb(bpd.weights_desc(), eng), dym(sd, eng, x.data()), dxm(sd, eng, dxr.data());
  reorder(wum, wb).execute(s, wum, wb);
  convolution_backward_data bd(bpd);
  auto t_bd = [&] {
    bd.execute(s, {{DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_WEIGHTS, wb}, {DNNL_ARG_DIFF_SRC, dxm}});
    s.wait();
  };
  auto t_own_bd = [&] { conv<C, P, Q>(N, H, W, x.data(), wf.data(), dx.data()); };
  t_bd();
  t_own_bd();
  err = 0, mx = 0;
  for (size_t i = 0; i < xs; ++i) {
    err = std::max(err, double(std::fabs(dx[i] - dxr[i])));
    mx = std::max(mx, double(std::fabs(dxr[i])));
  }
  a = time(t_bd), b = time(t_own_bd), a2 = time(t_bd), b2 = time(t_own_bd);
  a = std::min(a, a2), b = std::min(b, b2);
  printf(
      "C=%d %dx%d P=%d Q=%d: backward data [%s]: onednn %.3f ms  own %.3f ms  ratio %.3f  maxerr %.1e/%.1f\n",
      C, H, W, P, Q, bpd.impl_info_str(), a * 1e3, b * 1e3, a / b, err, mx);
}
int main() {
  run<16, 16, 1>(128, 32, 32);
  run<16, 8, 1>(128, 32, 32);
  run<32, 8, 2>(128, 16, 16);
  run<32, 16, 1>(128, 16, 16);
  run<64, 8, 2>(128, 8, 8);
  run<64, 4, 4>(128, 8, 8);
  run<64, 8, 1>(128, 8, 8);
  return 0;
}
