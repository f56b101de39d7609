// Probe: a stage-1 conv+BN pair's bf16 backward, whole batch vs ranges of images
// (batch norm's dx for a range into an L2-sized buffer, then the convolution's
// dx (oneDNN forward of dy with flipped weights) and dw (own AMX) on that range).
#include <immintrin.h>
#include <omp.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>
#include <dnnl.hpp>
#include "cifarnet/backend/onednn/amx_wgrad.hpp"
#include "cifarnet/backend/onednn/bn_kernels.hpp"
namespace amx = cifarnet::backend::onednn::amx;
namespace bn = cifarnet::backend::onednn::bn;
using namespace cifarnet;
using u16 = std::uint16_t;
static std::vector<char> evict(512u << 20);
static void cool() {
#pragma omp parallel for
  for (size_t i = 0; i < evict.size(); i += 64) evict[i] += 1;
}
struct Dx {  // oneDNN bf16 forward conv of dy (3x3 pad 1), bf16 dst
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::convolution_forward prim;
  dnnl::memory xm, wm, ym;
  Dx(int n, int hw, int c, const float* w) {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl::memory::desc xd({n, c, hw, hw}, dt::bf16, tag::nhwc), yd({n, c, hw, hw}, dt::bf16, tag::nhwc),
        wd({c, c, 3, 3}, dt::bf16, tag::any), wud({c, c, 3, 3}, dt::f32, tag::hwio);
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                      xd, wd, yd, {1, 1}, {1, 1}, {1, 1});
    dnnl::convolution_forward::primitive_desc pd(d, eng);
    prim = dnnl::convolution_forward(pd);
    xm = dnnl::memory(xd, eng, DNNL_MEMORY_NONE);
    ym = dnnl::memory(yd, eng, DNNL_MEMORY_NONE);
    wm = dnnl::memory(pd.weights_desc(), eng);
    dnnl::memory wu(wud, eng, const_cast<float*>(w));
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
template <class F>
double med(F&& f, bool cold) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> v;
  for (int r = 0; r < 15; ++r) {
    if (cold) cool();
    auto t0 = std::chrono::steady_clock::now();
    f();
    v.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(v.begin(), v.end());
  return v[7];
}
int main(int argc, char** argv) {
  struct S {
    int c, hw;
  };
  for (S s : {S{16, 32}, S{32, 16}, S{64, 8}}) {
    const int N = 128, C = s.c, HW = s.hw;
    const size_t img = size_t(HW) * HW * C, n = N * img;
    std::vector<u16> xbn(n), dz(n), xin(n), dy(n), dx(n);
    for (size_t i = 0; i < n; ++i) {
      xbn[i] = backend::host::bf16_bits(float(i % 97) / 50.f - 1.f);
      dz[i] = backend::host::bf16_bits(float(i % 89) / 400.f - 0.1f);
      xin[i] = backend::host::bf16_bits(float(i % 83) / 83.f);
    }
    std::vector<float> w(9 * C * C), dw(w.size()), dwp(w.size());
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(i % 13) / 13.f - 0.5f;
    std::vector<float> ab(2 * C, 0.5f), mean(C, 0.f), A(C, 0.9f), B(C, 0.01f), D(C, 0.001f), shift(C, 0.f);
    bn::Scratch sc;
    const ChannelGeom g =
        ChannelGeom::make(DataFormat::NHWC, Shape{size_t(N), size_t(C), size_t(HW), size_t(HW)});
    Dx dxw(N, HW, C, w.data());
    amx::WeightGrad wgw(N, HW, HW, C, C, 3, 3, 1, 1, 1, 1);
    auto sums = [&](const ChannelGeom& gg, const u16* xb, const u16* d) {
      bn::with_channels(gg, [&](auto cc) {
        bn::channel_sums<bn::SumKind::Grad, decltype(cc)::value, u16, u16>(gg, xb, d, ab.data(), shift.data(),
                                                                           sc);
      });
    };
    auto ig = [&](const ChannelGeom& gg, const u16* xb, const u16* d, u16* out) {
      bn::with_channels(gg, [&](auto cc) {
        bn::input_gradient<decltype(cc)::value>(gg, xb, d, ab.data(), mean.data(), A.data(), B.data(),
                                                D.data(), nullptr, out);
      });
    };
    auto whole = [&] {
      sums(g, xbn.data(), dz.data());
      ig(g, xbn.data(), dz.data(), dy.data());
      wgw.run(xin.data(), dy.data(), dw.data());
      dxw.run(dy.data(), dx.data());
    };
    for (int R : {8, 16, 32}) {
      Dx dxr(R, HW, C, w.data());
      amx::WeightGrad wgr(R, HW, HW, C, C, 3, 3, 1, 1, 1, 1);
      std::vector<u16> buf(R * img);
      const ChannelGeom gr =
          ChannelGeom::make(DataFormat::NHWC, Shape{size_t(R), size_t(C), size_t(HW), size_t(HW)});
      auto ranged = [&] {
        sums(g, xbn.data(), dz.data());
        for (int i0 = 0; i0 < N; i0 += R) {
          ig(gr, xbn.data() + i0 * img, dz.data() + i0 * img, buf.data());
          wgr.run(xin.data() + i0 * img, buf.data(), dwp.data());
          if (i0 == 0)
            std::copy(dwp.begin(), dwp.end(), dw.begin());
          else
            for (size_t k = 0; k < dw.size(); ++k) dw[k] += dwp[k];
          dxr.run(buf.data(), dx.data() + i0 * img);
        }
      };
      const double tw = med(whole, true), tr = med(ranged, true), tww = med(whole, false),
                   trw = med(ranged, false);
      printf("%d ch %dx%d, ranges of %d: cold whole %.3f ranged %.3f (%.2fx)   warm whole %.3f ranged %.3f\n",
             C, HW, HW, R, tw, tr, tw / tr, tww, trw);
    }
  }
}
