// Probe: an own fp32 weight-gradient kernel (NHWC 3x3 stride 1 pad 1) against
// oneDNN's backward_weights, and the batch norm's normalising pass
// recomputed in its prologue (the input never stored) against that pass apart.
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

// dw[kh][kw][ci][co] += sum over the image of xp[h+kh][w+kw][ci] dy[h][w][co].
template <int C, int CI, int Q>
void wgrad_image(int H, int W, const float* __restrict xp, const float* __restrict dy, float* __restrict dw) {
  const int WP = W + 2;
  for (int kh = 0; kh < 3; ++kh)
    for (int ci0 = 0; ci0 < C; ci0 += CI)
      for (int g = 0; g < C / (16 * Q); ++g) {
        __m512 acc[3 * CI * Q];
#pragma GCC unroll 64
        for (int i = 0; i < 3 * CI * Q; ++i) acc[i] = _mm512_setzero_ps();
        for (int h = 0; h < H; ++h) {
          const float* xr = xp + ((h + kh) * WP) * C + ci0;
          const float* dr = dy + size_t(h) * W * C + g * 16 * Q;
          for (int w = 0; w < W; ++w) {
            __m512 d[Q];
#pragma GCC unroll 8
            for (int q = 0; q < Q; ++q) d[q] = _mm512_loadu_ps(dr + w * C + 16 * q);
#pragma GCC unroll 3
            for (int kw = 0; kw < 3; ++kw)
#pragma GCC unroll 16
              for (int i = 0; i < CI; ++i) {
                const __m512 b = _mm512_set1_ps(xr[(w + kw) * C + i]);
#pragma GCC unroll 8
                for (int q = 0; q < Q; ++q)
                  acc[(kw * CI + i) * Q + q] = _mm512_fmadd_ps(b, d[q], acc[(kw * CI + i) * Q + q]);
              }
          }
        }
        for (int kw = 0; kw < 3; ++kw)
          for (int i = 0; i < CI; ++i)
            for (int q = 0; q < Q; ++q) {
              float* o = dw + ((kh * 3 + kw) * C + ci0 + i) * C + g * 16 * Q + 16 * q;
              _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), acc[(kw * CI + i) * Q + q]));
            }
      }
}

// mode 0: x given (copied into the padded image); 1: x = max(a s + b, 0) recomputed in the copy.
template <int C, int CI, int Q>
void wgrad(int mode, int N, int H, int W, const float* x, const float* sa, const float* sb, const float* dy,
           float* dw) {
  const int nt = omp_get_max_threads();
  std::vector<float> part(size_t(nt) * 9 * C * C, 0.f);
#pragma omp parallel
  {
    std::vector<float> xp(size_t(H + 2) * (W + 2) * C, 0.f);
    float* p = &part[size_t(omp_get_thread_num()) * 9 * C * C];
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* xi = x + size_t(n) * H * W * C;
      for (int h = 0; h < H; ++h) {
        float* d = &xp[((h + 1) * (W + 2) + 1) * C];
        const float* s = xi + size_t(h) * W * C;
        if (mode == 0) {
          std::memcpy(d, s, sizeof(float) * W * C);
        } else {
          for (int i = 0; i < W; ++i)
#pragma omp simd
            for (int c = 0; c < C; ++c) {
              const float v = s[i * C + c] * sa[c] + sb[c];
              d[i * C + c] = v > 0.f ? v : 0.f;
            }
        }
      }
      wgrad_image<C, CI, Q>(H, W, xp.data(), dy + size_t(n) * H * W * C, p);
    }
  }
  for (size_t i = 0; i < size_t(9) * C * C; ++i) {
    float s = 0.f;
    for (int t = 0; t < nt; ++t) s += part[size_t(t) * 9 * C * C + i];
    dw[i] = s;
  }
}

using namespace dnnl;
template <int C, int CI, int Q>
void run(int N, int H, int W) {
  const size_t xs = size_t(N) * H * W * C;
  std::vector<float> a(xs), x(xs), dy(xs), dw(9 * C * C), dwr(9 * C * C), sa(C), sb(C);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& v : a) v = nd(rng);
  for (auto& v : dy) v = nd(rng);
  for (int c = 0; c < C; ++c) sa[c] = 1.f + 0.1f * nd(rng), sb[c] = 0.1f * nd(rng);
  normalize<C>(size_t(N) * H * W, a.data(), sa.data(), sb.data(), x.data());
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
  const size_t rows = size_t(N) * H * W;
  auto dnnl_only = [&] {
    bw.execute(s, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_DIFF_WEIGHTS, dwm}});
    s.wait();
  };
  auto dnnl_recompute = [&] {
    normalize<C>(rows, a.data(), sa.data(), sb.data(), x.data());
    dnnl_only();
  };
  auto own0 = [&] { wgrad<C, CI, Q>(0, N, H, W, x.data(), sa.data(), sb.data(), dy.data(), dw.data()); };
  auto own1 = [&] { wgrad<C, CI, Q>(1, N, H, W, a.data(), sa.data(), sb.data(), dy.data(), dw.data()); };
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
  dnnl_only();
  reorder(dwm, dwu).execute(s, dwm, dwu);
  s.wait();
  own1();
  double err = 0, mx = 0;
  for (size_t i = 0; i < dw.size(); ++i) {
    err = std::max(err, double(std::fabs(dw[i] - dwr[i])));
    mx = std::max(mx, double(std::fabs(dwr[i])));
  }
  const double fl = 2.0 * N * H * W * C * C * 9;
  for (int cold = 0; cold < 2; ++cold) {
    const double t_d = time(dnnl_only, cold), t_dr = time(dnnl_recompute, cold), t_0 = time(own0, cold),
                 t_1 = time(own1, cold);
    printf(
        "C=%d %dx%d CI=%d Q=%d %s [%s]: onednn wgrad %.3f ms (%.0f GF/s), +normalise apart %.3f | own %.3f "
        "(%.0f GF/s), recomputing x in its copy %.3f  (maxerr %.1e of %.1f)\n",
        C, H, W, CI, Q, cold ? "after flush" : "hot", bpd.impl_info_str(), t_d, fl / t_d / 1e6, t_dr, t_0,
        fl / t_0 / 1e6, t_1, err, mx);
  }
}
int main() {
  std::printf("%d threads\n", omp_get_max_threads());
  run<16, 8, 1>(128, 32, 32);
  run<16, 4, 1>(128, 32, 32);
  run<32, 4, 2>(128, 16, 16);
  run<32, 8, 1>(128, 16, 16);
  run<64, 2, 4>(128, 8, 8);
  run<64, 4, 2>(128, 8, 8);
}
