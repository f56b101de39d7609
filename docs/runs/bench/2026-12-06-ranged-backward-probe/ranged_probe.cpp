// Probe (2026-12-06): what a bf16 backward run a range of images at a time
// could save on a ResNet stage's 3x3 convolution, on a 2-core AMX Xeon.
// Three passes stand for a convolution's backward in the bf16 step:
//  - the producer of dy: the batch norm's input-gradient pass, here a
//    stand-in that reads two bf16 tensors and writes their sum as bf16
//    (the same bytes read and written as that pass's gradient and output);
//  - the weight gradient: the library's amx::WeightGrad on x and dy;
//  - the data gradient: oneDNN 2.6's bf16 forward convolution of dy (the
//    step runs the stride-1 data gradient as that, with flipped weights),
//    bf16 out.
// "whole": each pass over the batch, one after the other (today's step);
// "ranged R": the three passes over R images at a time, dy written into a
// buffer of R images that the two convolution passes read from cache,
// the weight gradient's partials of the ranges added. Caches evicted
// before each timed call (64 MiB written), medians of 11.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <dnnl.hpp>

#include "cifarnet/backend/onednn/amx_wgrad.hpp"

namespace amx = cifarnet::backend::onednn::amx;
using u16 = std::uint16_t;

static u16 to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return u16(u >> 16);
}

struct Conv {  // oneDNN bf16 forward, NHWC, 3x3, stride 1, padding 1, bf16 out
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::convolution_forward prim;
  dnnl::memory xm, wm, ym;
  Conv(int n, int h, int w, int ic, int oc, const float* w_hwio) {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl::memory::desc xd({n, ic, h, w}, dt::bf16, tag::nhwc), yd({n, oc, h, w}, dt::bf16, tag::nhwc),
        wd({oc, ic, 3, 3}, dt::bf16, tag::any), wud({oc, ic, 3, 3}, dt::f32, tag::hwio);
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                      xd, wd, yd, {1, 1}, {1, 1}, {1, 1});
    dnnl::convolution_forward::primitive_desc pd(d, eng);
    prim = dnnl::convolution_forward(pd);
    xm = dnnl::memory(xd, eng, DNNL_MEMORY_NONE);
    ym = dnnl::memory(yd, eng, DNNL_MEMORY_NONE);
    wm = dnnl::memory(pd.weights_desc(), eng);
    dnnl::memory wu(wud, eng, const_cast<float*>(w_hwio));
    dnnl::reorder(wu, wm).execute(strm, wu, wm);
    strm.wait();
  }
  void run(const u16* x, u16* y) {
    xm.set_data_handle(const_cast<u16*>(x));
    ym.set_data_handle(y);
    prim.execute(strm, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
    strm.wait();
  }
};

// out[i] = bf16(a[i] + b[i]) for i in [0, count), count a multiple of 16.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void produce(const u16* a, const u16* b,
                                                                           u16* out, std::size_t count) {
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < count; i += 16) {
    const __m512 fa = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i))), 16));
    const __m512 fb = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i))), 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_add_ps(fa, fb))));
  }
}

static std::vector<float> junk(16u << 20);
static void flush() {
#pragma omp parallel for
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] += 1.f;
}

// Per-pass times of the last timed call's passes (ms), summed over its ranges.
static double pass_ms[3];
using Clock = std::chrono::steady_clock;
static double since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

template <class F>
static double time_ms(F&& f) {
  std::vector<double> t;
  for (int r = 0; r < 13; ++r) {
    flush();
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    if (r >= 2) t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  if (!amx::amx_available()) {
    std::printf("no AMX\n");
    return 1;
  }
  struct G {
    int n, h, w, c;
  };
  const G gs[] = {{128, 32, 32, 16}, {128, 16, 16, 32}, {128, 8, 8, 64}};
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const G& g : gs) {
    const std::size_t img = std::size_t(g.h) * g.w * g.c, all = img * std::size_t(g.n);
    std::vector<float> wf(9 * std::size_t(g.c) * g.c);
    for (auto& v : wf) v = nd(rng) * 0.1f;
    std::vector<u16> x(all), a(all), b(all), dy(all), dx(all);
    for (auto* v : {&x, &a, &b})
      for (auto& e : *v) e = to_bf16(nd(rng));
    std::vector<float> dw(wf.size()), part(wf.size()), dw_r(wf.size());
    amx::WeightGrad wg(std::size_t(g.n), std::size_t(g.h), std::size_t(g.w), std::size_t(g.c),
                       std::size_t(g.c), 3, 3, 1, 1, 1, 1);
    Conv conv(g.n, g.h, g.w, g.c, g.c, wf.data());
    const double whole = time_ms([&] {
      auto t = Clock::now();
      produce(a.data(), b.data(), dy.data(), all);
      pass_ms[0] = since(t), t = Clock::now();
      wg.run(x.data(), dy.data(), dw.data());
      pass_ms[1] = since(t), t = Clock::now();
      conv.run(dy.data(), dx.data());
      pass_ms[2] = since(t);
    });
    std::printf(
        "%d -> %d at %dx%d, batch %d, %d threads: whole %.3f ms (last call: dy %.3f, weights %.3f, data "
        "%.3f)\n",
        g.c, g.c, g.h, g.w, g.n, omp_get_max_threads(), whole, pass_ms[0], pass_ms[1], pass_ms[2]);
    for (int R : {16, 32}) {
      amx::WeightGrad wr(std::size_t(R), std::size_t(g.h), std::size_t(g.w), std::size_t(g.c),
                         std::size_t(g.c), 3, 3, 1, 1, 1, 1);
      Conv cr(R, g.h, g.w, g.c, g.c, wf.data());
      std::vector<u16> dyr(img * std::size_t(R));
      const double ranged = time_ms([&] {
        pass_ms[0] = pass_ms[1] = pass_ms[2] = 0;
        for (int i0 = 0; i0 < g.n; i0 += R) {
          const std::size_t at = std::size_t(i0) * img;
          auto t = Clock::now();
          produce(a.data() + at, b.data() + at, dyr.data(), dyr.size());
          pass_ms[0] += since(t), t = Clock::now();
          wr.run(x.data() + at, dyr.data(), i0 == 0 ? dw_r.data() : part.data());
          if (i0 != 0)
            for (std::size_t e = 0; e < part.size(); ++e) dw_r[e] += part[e];
          pass_ms[1] += since(t), t = Clock::now();
          cr.run(dyr.data(), dx.data() + at);
          pass_ms[2] += since(t);
        }
      });
      std::printf(
          "  ranged %d: %.3f ms (whole / ranged %.2fx; last call: dy %.3f, weights %.3f, data %.3f)\n", R,
          ranged, whole / ranged, pass_ms[0], pass_ms[1], pass_ms[2]);
    }
  }
}
