// Probe (2026-12-06): the library's own AMX forward 3x3 convolution
// (amx::Forward3x3, stride 1, padding 1, NHWC bf16 in and out) against
// oneDNN 2.6's bf16 forward convolution, the kernel the bf16 training step
// runs for a block's first convolution and for every stride-1 data gradient
// (a forward convolution of dy with the flipped weights). The harness of
// docs/runs/bench/2026-12-04-amx-conv-probe/library_kernel.cpp with one
// switch added: NOSTATSPASS=1 leaves the statistics pass out of oneDNN's
// column (with NOSTATS=1 for the own kernel: both the convolution alone).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include <dnnl.hpp>

#include "cifarnet/backend/onednn/amx_conv.hpp"

namespace amx = cifarnet::backend::onednn::amx;
using u16 = std::uint16_t;

static u16 to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return u16(u >> 16);
}
static float from_bf16(u16 b) {
  std::uint32_t u = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// oneDNN: bf16 forward (bf16 dst), then the statistics pass over y.
struct DnnlConv {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::convolution_forward prim;
  dnnl::memory xm, wm, ym;
  int n, h, w, ic, oc;
  DnnlConv(int n_, int h_, int w_, int ic_, int oc_, const float* w_hwio)
      : n(n_), h(h_), w(w_), ic(ic_), oc(oc_) {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl::memory::desc xd({n, ic, h, w}, dt::bf16, tag::nhwc), yd({n, oc, h, w}, dt::bf16, tag::nhwc),
        wd({oc, ic, 3, 3}, dt::bf16, tag::any), wud({oc, ic, 3, 3}, dt::f32, tag::hwio);
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                      xd, wd, yd, {1, 1}, {1, 1}, {1, 1});
    dnnl::convolution_forward::primitive_desc pd(d, eng);
    std::printf("  oneDNN kernel: %s\n", pd.impl_info_str());
    prim = dnnl::convolution_forward(pd);
    xm = dnnl::memory(xd, eng, DNNL_MEMORY_NONE);
    ym = dnnl::memory(yd, eng, DNNL_MEMORY_NONE);
    wm = dnnl::memory(pd.weights_desc(), eng);
    dnnl::memory wu(wud, eng, const_cast<float*>(w_hwio));
    dnnl::reorder(wu, wm).execute(strm, wu, wm);
    strm.wait();
  }
  const float* pscale = nullptr;
  const float* pshift = nullptr;
  std::vector<u16> xa;  // the batch norm's output, written by its apply pass
  void run(const u16* x, u16* y, double* sums) {
    if (pscale) {
      const std::size_t pix = std::size_t(n) * h * w;
      xa.resize(pix * ic);
#pragma omp parallel for schedule(static)
      for (std::size_t p = 0; p < pix; ++p)
        for (int c0 = 0; c0 < ic; c0 += 16) {
          const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + p * ic + c0));
          const __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
          const __m512 v =
              _mm512_max_ps(_mm512_fmadd_ps(f, _mm512_loadu_ps(pscale + c0), _mm512_loadu_ps(pshift + c0)),
                            _mm512_setzero_ps());
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(xa.data() + p * ic + c0),
                              (__m256i)_mm512_cvtneps_pbh(v));
        }
      x = xa.data();
    }
    xm.set_data_handle(const_cast<u16*>(x));
    ym.set_data_handle(y);
    prim.execute(strm, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
    strm.wait();
    if (std::getenv("NOSTATSPASS")) return;  // the convolution alone
    const std::size_t pix = std::size_t(n) * h * w;
    const int ocb = oc / 16;
    std::vector<float> part(std::size_t(omp_get_max_threads()) * 2 * oc, 0.f);
#pragma omp parallel
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      float* S = part.data() + std::size_t(t) * 2 * oc;
      for (int nb = 0; nb < ocb; ++nb) {
        __m512 s = _mm512_setzero_ps(), ss = _mm512_setzero_ps();
        for (std::size_t p = pix * t / nt; p < pix * (t + 1) / nt; ++p) {
          const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + p * oc + nb * 16));
          const __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
          s = _mm512_add_ps(s, f);
          ss = _mm512_fmadd_ps(f, f, ss);
        }
        _mm512_storeu_ps(S + nb * 16, s);
        _mm512_storeu_ps(S + oc + nb * 16, ss);
      }
    }
    for (int c = 0; c < 2 * oc; ++c) {
      double s = 0;
      for (int t = 0; t < omp_get_max_threads(); ++t) s += part[std::size_t(t) * 2 * oc + c];
      sums[c] = s;
    }
  }
};

static std::vector<float> junk(64u << 20);
static void flush() {
#pragma omp parallel for
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] += 1.f;
}

template <class F>
static double time_ms(F&& f, bool cold) {
  std::vector<double> t;
  for (int r = 0; r < 13; ++r) {
    if (cold) flush();
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    if (r >= 2) t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  if (!amx::amx_available()) {
    std::printf("no AMX\n");
    return 1;
  }
  struct G {
    int n, h, w, ic, oc;
  };
  const G gs[] = {{128, 32, 32, 16, 16}, {128, 16, 16, 32, 32}, {128, 8, 8, 64, 64}};
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const G& g : gs) {
    std::printf("%d -> %d at %dx%d, batch %d, %d threads\n", g.ic, g.oc, g.h, g.w, g.n,
                omp_get_max_threads());
    std::vector<float> wf(9 * g.ic * g.oc);
    for (auto& v : wf) v = nd(rng) * 0.1f;
    std::vector<u16> x(std::size_t(g.n) * g.h * g.w * g.ic), y1(std::size_t(g.n) * g.h * g.w * g.oc),
        y2(y1.size());
    const bool pro = std::getenv("PROLOGUE") != nullptr;
    for (auto& v : x) v = to_bf16(pro ? nd(rng) : std::max(0.f, nd(rng)));
    std::vector<float> sc(g.ic), sh(g.ic);
    for (int c = 0; c < g.ic; ++c) sc[c] = 0.5f + 0.01f * c, sh[c] = 0.1f - 0.005f * c;
    amx::Forward3x3 a(g.n, g.h, g.w, g.ic, g.oc);
    a.set_weights(wf.data());
    amx::InputMap map{sc.data(), sh.data(), true};
    DnnlConv d(g.n, g.h, g.w, g.ic, g.oc, wf.data());
    if (pro) d.pscale = sc.data(), d.pshift = sh.data();
    const amx::InputMap* mp = pro ? &map : nullptr;
    if (pro)
      std::printf(
          "  with the batch norm's map and ReLU: the own conv's prologue against an apply pass before "
          "oneDNN's\n");
    std::vector<double> s1(2 * g.oc), s2(2 * g.oc);
    a.run(x.data(), mp, y1.data(), s1.data());
    d.run(x.data(), y2.data(), s2.data());
    // Agreement: both sum bf16 products in float; compare the float values.
    double maxd = 0, maxv = 0, maxs = 0;
    for (std::size_t i = 0; i < y1.size(); ++i) {
      maxd = std::max(maxd, double(std::fabs(from_bf16(y1[i]) - from_bf16(y2[i]))));
      maxv = std::max(maxv, double(std::fabs(from_bf16(y2[i]))));
    }
    for (int c = 0; c < 2 * g.oc; ++c)
      maxs = std::max(maxs, std::fabs(s1[c] - s2[c]) / std::max(1.0, std::fabs(s2[c])));
    std::printf("  max |own - oneDNN| %.3g of max |y| %.3g; statistics max rel. difference %.3g\n", maxd,
                maxv, maxs);
    const double gf = 2.0 * g.n * g.h * g.w * g.ic * g.oc * 9 / 1e9;
    for (int cold = 0; cold < 2; ++cold) {
      const double ta = time_ms(
          [&] { a.run(x.data(), mp, y1.data(), std::getenv("NOSTATS") ? nullptr : s1.data()); }, cold);
      const double td = time_ms([&] { d.run(x.data(), y2.data(), s2.data()); }, cold);
      std::printf(
          "  %s: own AMX conv + stats epilogue %.3f ms (%.0f GFLOP/s), oneDNN conv + stats pass %.3f ms: "
          "%.2fx\n",
          cold ? "cold" : "warm", ta, gf / ta * 1e3, td, td / ta);
    }
  }
}
