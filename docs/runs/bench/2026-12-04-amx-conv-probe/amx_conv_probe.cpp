// Probe: an own AMX forward 3x3 convolution (stride 1, padding 1, NHWC
// bf16 in and out) with the batch norm's statistics (per output channel
// sum and sum of squares of the bf16 output) summed in its epilogue,
// against oneDNN 2.6's bf16 forward convolution plus a separate
// statistics pass over its output (what the bf16 training step runs).
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

#include "cifarnet/backend/onednn/amx_wgrad.hpp"

namespace T = cifarnet::backend::onednn::amx::detail;
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

// 64-byte aligned storage: a tile load from a row that is not 64-byte
// aligned costs several aligned ones.
template <class V>
struct AAlloc {
  using value_type = V;
  AAlloc() = default;
  template <class U>
  AAlloc(const AAlloc<U>&) {}
  V* allocate(std::size_t n) { return static_cast<V*>(::operator new(n * sizeof(V), std::align_val_t(64))); }
  void deallocate(V* p, std::size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const AAlloc&) const { return true; }
  bool operator!=(const AAlloc&) const { return false; }
};
using avec = std::vector<u16, AAlloc<u16>>;

struct AmxConv {
  int n, h, w, ic, oc, pw, ph, kc, taps, kb, ocb;
  bool ovl = false;
  std::vector<avec> bigbuf;
  avec wp;                             // [tap][kb][nb][16 pair rows][16 oc][2]
  std::vector<std::vector<float>> st;  // per thread [2][oc]
  AmxConv(int n_, int h_, int w_, int ic_, int oc_, const float* w_hwio)
      : n(n_), h(h_), w(w_), ic(ic_), oc(oc_) {
    pw = w + 2;
    ph = h + 2;
    const bool exp = ic == 16;
    ovl = exp && std::getenv("OVERLAP") != nullptr;
    if (const char* gs = std::getenv("GROUP")) group = std::atoi(gs);
    kc = exp ? 64 : ic;
    taps = exp ? 3 : 9;
    kb = kc / 32;
    ocb = oc / 16;
    wp.assign(std::size_t(taps) * kb * ocb * 512, 0);
    for (int t = 0; t < taps; ++t)
      for (int kk = 0; kk < kc; ++kk) {
        int i, j, c;
        if (exp) {
          if (kk >= 48) continue;
          i = t, j = kk / 16, c = kk % 16;
        } else {
          i = t / 3, j = t % 3, c = kk;
        }
        const int k = kk / 32, pr = (kk % 32) / 2, e = kk % 2;
        for (int o = 0; o < oc; ++o) {
          const int nb = o / 16, ol = o % 16;
          wp[((std::size_t(t) * kb + k) * ocb + nb) * 512 + pr * 32 + ol * 2 + e] =
              to_bf16(w_hwio[((i * 3 + j) * ic + c) * oc + o]);
        }
      }
    const int nt = omp_get_max_threads();
    st.assign(nt, std::vector<float>(2 * oc, 0.f));
    bigbuf.resize(std::size_t(nt));
  }

  // Images are stacked into one tall padded image per group of G images:
  // a zero row above each image (the one below the last image too), a zero
  // column left and right of each row; output position q = r * pw + c over
  // the stacked rows, so the 3x3 taps are the shifts (i * pw + j) and the
  // positions of the zero rows and columns are left out in the epilogue.
  int group = 8;
  int rows(int g) const { return g * (h + 1) + 1; }
  // x: [n][h][w][ic] bf16; y: [n][h][w][oc] bf16; sums: [2][oc] (sum, sum of squares) in double.
  void run(const u16* x, u16* y, double* sums) {
#pragma omp parallel
    {
      T::tile_config();
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      float* S = st[std::size_t(t)].data();
      std::fill(S, S + 2 * oc, 0.f);
      const int m0 = n * t / nt, m1 = n * (t + 1) / nt;
      avec& P = bigbuf[std::size_t(t)];
      const int cpos = ic == 16 && !ovl ? 64 : ic;  // channels per stored position
      const std::size_t need = (std::size_t(rows(group)) * pw + 256) * cpos;
      if (P.size() < need) P.assign(need, 0);
      for (int g0 = m0; g0 < m1; g0 += group) {
        const int g = std::min(group, m1 - g0);
        stack(x + std::size_t(g0) * h * w * ic, g, P.data());
        const int mtiles = (g * (h + 1) * pw + 15) / 16;
        u16* yg = y + std::size_t(g0) * h * w * oc;
        if (ocb == 1) {
          for (int mt = 0; mt < mtiles; mt += 4) block<4, 1>(P.data(), yg, S, mt, 0, mtiles, g);
        } else {
          for (int nb = 0; nb < ocb; nb += 2)
            for (int mt = 0; mt < mtiles; mt += 2) block<2, 2>(P.data(), yg, S, mt, nb, mtiles, g);
        }
      }
      T::tile_release();
    }
    for (int c = 0; c < 2 * oc; ++c) {
      double s = 0;
      for (auto& v : st) s += v[std::size_t(c)];
      sums[c] = s;
    }
  }

  // g images into the stacked layout (zeros stay where they were written
  // at allocation: every group writes the same data positions).
  void stack(const u16* x, int g, u16* P) {
    if (ic == 16 && !ovl) {
      // Each position: its own 16 channels and the next two positions', then 16 zeros.
      const int npos = rows(g) * pw;
      alignas(64) static thread_local std::vector<u16> tmp;
      tmp.assign((std::size_t(npos) + 256) * 16, 0);
      for (int m = 0; m < g; ++m)
        for (int r = 0; r < h; ++r)
          std::memcpy(tmp.data() + (std::size_t(m * (h + 1) + r + 1) * pw + 1) * 16,
                      x + (std::size_t(m) * h + r) * w * 16, std::size_t(w) * 32);
      for (int q = 0; q < npos; ++q) {
        _mm512_storeu_si512(P + std::size_t(q) * 64, _mm512_loadu_si512(tmp.data() + std::size_t(q) * 16));
        _mm512_storeu_si512(P + std::size_t(q) * 64 + 32,
                            _mm512_zextsi256_si512(_mm256_loadu_si256(
                                reinterpret_cast<const __m256i*>(tmp.data() + std::size_t(q) * 16 + 32))));
      }
      return;
    }
    for (int m = 0; m < g; ++m)
      for (int r = 0; r < h; ++r)
        std::memcpy(P + (std::size_t(m * (h + 1) + r + 1) * pw + 1) * ic,
                    x + (std::size_t(m) * h + r) * w * ic, std::size_t(w) * ic * 2);
  }

  template <int MT, int NT>
  void block(const u16* A, u16* y, float* S, int mt0, int nb0, int mtiles, int gimg) {
    const long astride = ovl ? 32 : long(kc) * 2;
    T::static_for<MT * NT>([&](auto c) { T::tile_zero<decltype(c)::value>(); });
    for (int t = 0; t < taps; ++t) {
      const int toff = taps == 3 ? t * pw : (t / 3) * pw + t % 3;
      for (int k = 0; k < kb; ++k) {
        const u16* B = wp.data() + ((std::size_t(t) * kb + k) * ocb + nb0) * 512;
        T::static_for<NT>([&](auto v) {
          T::tile_load<MT * NT + 2 + decltype(v)::value>(B + decltype(v)::value * 512, 64);
        });
        T::static_for<MT>([&](auto u) {
          constexpr int ua = decltype(u)::value;
          constexpr int areg = MT * NT + (ua % 2);
          const int mt = std::min(mt0 + ua, mtiles - 1);
          if (ovl)
            T::tile_load<areg>(A + (std::size_t(mt) * 16 + toff + 2 * k) * 16, astride);
          else
            T::tile_load<areg>(A + (std::size_t(mt) * 16 + toff) * kc + k * 32, astride);
          T::static_for<NT>([&](auto v) {
            constexpr int va = decltype(v)::value;
            T::tile_dp<ua * NT + va, areg, MT * NT + 2 + va>();
          });
        });
      }
    }
    alignas(64) float buf[16 * 16];
    T::static_for<MT>([&](auto u) {
      constexpr int ua = decltype(u)::value;
      const int mt = mt0 + ua;
      T::static_for<NT>([&](auto v) {
        constexpr int va = decltype(v)::value;
        T::tile_store<ua * NT + va>(buf, 64);
        if (mt >= mtiles) return;
        const int nb = nb0 + va;
        __m512 s = _mm512_loadu_ps(S + nb * 16), ss = _mm512_loadu_ps(S + oc + nb * 16);
        // Position mt*16 in (stacked row r, column c); r = m*(h+1) + yy.
        int r = (mt * 16) / pw, c = (mt * 16) % pw;
        int m = r / (h + 1), yy = r % (h + 1);
        for (int i = 0; i < 16; ++i, ++c) {
          if (c == pw) {
            c = 0;
            if (++yy == h + 1) yy = 0, ++m;
          }
          if (yy >= h || c >= w || m >= gimg) continue;
          const __m256i bits = (__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(buf + i * 16));
          _mm256_storeu_si256(
              reinterpret_cast<__m256i*>(y + ((std::size_t(m) * h + yy) * w + c) * oc + nb * 16), bits);
          const __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
          s = _mm512_add_ps(s, f);
          ss = _mm512_fmadd_ps(f, f, ss);
        }
        _mm512_storeu_ps(S + nb * 16, s);
        _mm512_storeu_ps(S + oc + nb * 16, ss);
      });
    });
  }
};

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
  __attribute__((target("avx512f,avx512bw,avx512vl"))) void run(const u16* x, u16* y, double* sums) {
    xm.set_data_handle(const_cast<u16*>(x));
    ym.set_data_handle(y);
    prim.execute(strm, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
    strm.wait();
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
  if (!cifarnet::backend::onednn::amx::amx_available()) {
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
    for (auto& v : x) v = to_bf16(std::max(0.f, nd(rng)));
    AmxConv a(g.n, g.h, g.w, g.ic, g.oc, wf.data());
    DnnlConv d(g.n, g.h, g.w, g.ic, g.oc, wf.data());
    std::vector<double> s1(2 * g.oc), s2(2 * g.oc);
    a.run(x.data(), y1.data(), s1.data());
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
      const double ta = time_ms([&] { a.run(x.data(), y1.data(), s1.data()); }, cold);
      const double td = time_ms([&] { d.run(x.data(), y2.data(), s2.data()); }, cold);
      std::printf(
          "  %s: own AMX conv + stats epilogue %.3f ms (%.0f GFLOP/s), oneDNN conv + stats pass %.3f ms: "
          "%.2fx\n",
          cold ? "cold" : "warm", ta, gf / ta * 1e3, td, td / ta);
    }
  }
}
