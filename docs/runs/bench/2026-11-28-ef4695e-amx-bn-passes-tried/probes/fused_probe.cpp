// Probe: does a batch norm's normalising pass (prologue) and its statistics
// (epilogue) come free inside an own direct convolution, against oneDNN's
// convolution with the same passes apart? NHWC 3x3 stride 1 pad 1, fp32.
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

static std::vector<char> flush_buf(size_t(256) << 20);
static void flush() {
#pragma omp parallel for
  for (size_t i = 0; i < flush_buf.size(); i += 64) flush_buf[i]++;
}

// y = max(x a + b, 0) per channel (the separate normalising pass).
template <int C>
void normalize(size_t rows, const float* x, const float* a, const float* b, float* y) {
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; ++r)
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      const float v = x[r * C + c] * a[c] + b[c];
      y[r * C + c] = v > 0.f ? v : 0.f;
    }
}
// Per-channel sum and sum of squares in double (the separate statistics pass).
template <int C>
void stats(size_t rows, const float* y, double* s) {
  std::vector<double> part(size_t(omp_get_max_threads()) * 2 * C, 0.0);
#pragma omp parallel
  {
    double* p = &part[size_t(omp_get_thread_num()) * 2 * C];
    float bs[C], bq[C];
#pragma omp for schedule(static)
    for (size_t r0 = 0; r0 < rows; r0 += 16) {
      for (int c = 0; c < C; ++c) bs[c] = bq[c] = 0.f;
      for (size_t r = r0; r < std::min(rows, r0 + 16); ++r)
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          bs[c] += y[r * C + c];
          bq[c] += y[r * C + c] * y[r * C + c];
        }
      for (int c = 0; c < C; ++c) p[c] += bs[c], p[C + c] += bq[c];
    }
  }
  for (int c = 0; c < 2 * C; ++c) {
    s[c] = 0;
    for (int t = 0; t < omp_get_max_threads(); ++t) s[c] += part[size_t(t) * 2 * C + c];
  }
}

// Own direct convolution of one padded image; with Stats the tile's sums
// and sums of squares go into st (2C doubles, via float tile sums).
template <int C, int R, int P, int Q, bool Stats>
void conv_image(int H, int W, const float* __restrict xp, const float* __restrict w, float* __restrict y,
                double* st) {
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
        for (int q = 0; q < Q; ++q) {
          __m512 s = _mm512_setzero_ps(), ss = _mm512_setzero_ps();
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r)
#pragma GCC unroll 32
            for (int p = 0; p < P; ++p) {
              const __m512 v = acc[(r * P + p) * Q + q];
              _mm512_storeu_ps(y + ((h + r) * W + w0 + p) * C + g * 16 * Q + 16 * q, v);
              if (Stats) {
                s = _mm512_add_ps(s, v);
                ss = _mm512_fmadd_ps(v, v, ss);
              }
            }
          if (Stats) {
            alignas(64) float fs[16], fq[16];
            _mm512_store_ps(fs, s);
            _mm512_store_ps(fq, ss);
            const int c0 = g * 16 * Q + 16 * q;
            for (int j = 0; j < 16; ++j) st[c0 + j] += fs[j], st[C + c0 + j] += fq[j];
          }
        }
      }
}

// Mode 0: plain (x copied); 1: x normalised in the copy (prologue);
// 2: prologue + statistics epilogue; 3: prologue writing y out too + epilogue.
template <int C, int R, int P, int Q>
void conv(int mode, int N, int H, int W, const float* x, const float* a, const float* b, const float* w,
          float* y, float* yout, double* st) {
  std::vector<double> part(size_t(omp_get_max_threads()) * 2 * C, 0.0);
#pragma omp parallel
  {
    std::vector<float> xp(size_t(H + 2) * (W + 2) * C, 0.f);
    double* p = &part[size_t(omp_get_thread_num()) * 2 * C];
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* xi = x + size_t(n) * H * W * C;
      for (int h = 0; h < H; ++h) {
        float* d = &xp[((h + 1) * (W + 2) + 1) * C];
        const float* s = xi + size_t(h) * W * C;
        if (mode == 0) {
          std::memcpy(d, s, sizeof(float) * W * C);
        } else {
          float* o = mode == 3 ? yout + size_t(n) * H * W * C + size_t(h) * W * C : nullptr;
          for (int i = 0; i < W; ++i)
#pragma omp simd
            for (int c = 0; c < C; ++c) {
              const float v = s[i * C + c] * a[c] + b[c];
              d[i * C + c] = v > 0.f ? v : 0.f;
            }
          if (o) std::memcpy(o, d, sizeof(float) * W * C);
        }
      }
      if (mode >= 2)
        conv_image<C, R, P, Q, true>(H, W, xp.data(), w, y + size_t(n) * H * W * C, p);
      else
        conv_image<C, R, P, Q, false>(H, W, xp.data(), w, y + size_t(n) * H * W * C, p);
    }
  }
  for (int c = 0; c < 2 * C; ++c) {
    st[c] = 0;
    for (int t = 0; t < omp_get_max_threads(); ++t) st[c] += part[size_t(t) * 2 * C + c];
  }
}

using namespace dnnl;
template <int C, int R, int P, int Q>
void run(int N, int H, int W) {
  const size_t xs = size_t(N) * H * W * C;
  std::vector<float> x(xs), wt(9 * C * C), y(xs), yr(xs), yn(xs), yo(xs), a(C), b(C);
  std::vector<double> st(2 * C), str(2 * C);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  for (auto& v : wt) v = nd(rng) * 0.1f;
  for (int c = 0; c < C; ++c) a[c] = 1.f + 0.1f * nd(rng), b[c] = 0.1f * nd(rng);
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  memory::desc sd({N, C, H, W}, memory::data_type::f32, memory::format_tag::nhwc);
  memory::desc wd({C, C, 3, 3}, memory::data_type::f32, memory::format_tag::any);
  memory::desc wu({C, C, 3, 3}, memory::data_type::f32, memory::format_tag::hwio);
  convolution_forward::desc d(prop_kind::forward_training, algorithm::convolution_direct, sd, wd, sd, {1, 1},
                              {1, 1}, {1, 1});
  convolution_forward::primitive_desc pd(d, eng);
  memory xm(sd, eng, yn.data()), ym(sd, eng, yr.data()), wum(wu, eng, wt.data()), wm(pd.weights_desc(), eng);
  reorder(wum, wm).execute(s, wum, wm);
  convolution_forward cf(pd);
  const size_t rows = size_t(N) * H * W;
  // oneDNN with the batch norm's passes apart: normalise x into yn, convolve, statistics of the output.
  auto apart = [&] {
    normalize<C>(rows, x.data(), a.data(), b.data(), yn.data());
    cf.execute(s, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
    s.wait();
    stats<C>(rows, yr.data(), str.data());
  };
  auto conv_only = [&] {
    cf.execute(s, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
    s.wait();
  };
  auto own = [&](int mode) {
    return [&, mode] {
      conv<C, R, P, Q>(mode, N, H, W, x.data(), a.data(), b.data(), wt.data(), y.data(), yo.data(),
                       st.data());
    };
  };
  auto time = [](auto f, bool cold) {
    std::vector<double> v;
    for (int i = 0; i < 11; ++i) {
      if (cold) flush();
      auto t0 = std::chrono::steady_clock::now();
      f();
      v.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2] * 1e3;
  };
  apart();
  own(2)();
  double err = 0, mx = 0, serr = 0;
  for (size_t i = 0; i < xs; ++i) {
    err = std::max(err, double(std::fabs(y[i] - yr[i])));
    mx = std::max(mx, double(std::fabs(yr[i])));
  }
  for (int c = 0; c < 2 * C; ++c) serr = std::max(serr, std::fabs(st[c] - str[c]) / std::fabs(str[c]));
  for (int cold = 0; cold < 2; ++cold) {
    const double t_conv = time(conv_only, cold), t_apart = time(apart, cold), t0 = time(own(0), cold),
                 t1 = time(own(1), cold), t2 = time(own(2), cold), t3 = time(own(3), cold);
    printf(
        "C=%d %dx%d R=%d P=%d Q=%d %s: onednn conv %.3f, +bn passes %.3f | own plain %.3f, +prologue %.3f, "
        "+epilogue %.3f, +y out %.3f ms  (maxerr %.1e/%.1f, stats rel %.1e)\n",
        C, H, W, R, P, Q, cold ? "after flush" : "hot", t_conv, t_apart, t0, t1, t2, t3, err, mx, serr);
  }
}
int main() {
  std::printf("%d threads\n", omp_get_max_threads());
  run<16, 1, 16, 1>(128, 32, 32);
  run<16, 2, 8, 1>(128, 32, 32);
  run<32, 1, 8, 2>(128, 16, 16);
  run<64, 1, 8, 2>(128, 8, 8);
}
