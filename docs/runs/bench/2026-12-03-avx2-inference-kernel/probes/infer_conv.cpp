// oneDNN's forward_inference convolution (bias + ReLU post-op, NHWC, weights
// in its own layout) against the own forward kernel (direct::forward_images,
// no epilogue) on ResNet's 3x3 stage shapes, batch N, median of 21 runs.
#include <cifarnet/backend/onednn/direct_conv.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
using namespace cifarnet;
namespace on = cifarnet::backend::onednn;
template <class F>
double timeit(F&& f, int reps) {
  f();
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
void shape(int C, int H, int N) {
  const int W = H;
  std::vector<float> x(size_t(N) * H * W * C), w(9 * C * C), b(C), y(x.size()), y2(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 7919) % 1000) / 1000.f - 0.5f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = float((i * 104729) % 1000) / 10000.f - 0.05f;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dnnl::memory::dims src{N, C, H, W}, wd{C, C, 3, 3}, bd{C};
  dnnl::memory::desc sd(src, dt::f32, tag::nhwc), wany(wd, dt::f32, tag::any), bdesc(bd, dt::f32, tag::x);
  dnnl::post_ops po;
  po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  dnnl::convolution_forward::primitive_desc pd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                      sd, wany, bdesc, sd, {1, 1}, {1, 1}, {1, 1}),
      attr, eng);
  dnnl::memory wu({wd, dt::f32, tag::hwio}, eng, w.data()), wm(pd.weights_desc(), eng);
  dnnl::reorder(wu, wm).execute(s, wu, wm);
  dnnl::memory xm(sd, eng, x.data()), ym(sd, eng, y.data()), bm(bdesc, eng, b.data());
  dnnl::convolution_forward conv(pd);
  const double t1 = timeit(
      [&] {
        conv.execute(s,
                     {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, ym}});
        s.wait();
      },
      21);
  ConvGeom g;
  g.fmt = DataFormat::NHWC;
  g.n = N, g.ic = g.oc = C, g.ih = g.oh = H, g.iw = g.ow = W, g.kh = g.kw = 3, g.sh = g.sw = 1;
  g.pt = g.pb = g.pl = g.pr = 1;
  on::direct::Scratch sc;
  const double t2 =
      timeit([&] { on::direct::forward_images(g, x.data(), w.data(), y2.data(), sc, nullptr); }, 21);
  double gf = 2.0 * N * H * W * 9.0 * C * C * 1e-9;
  std::printf(
      "C=%2d %2dx%2d N=%d  oneDNN %s %.3f ms %.1f GFLOP/s | own %.3f ms %.1f GFLOP/s | own/oneDNN %.2fx\n", C,
      H, W, N, pd.impl_info_str(), t1 * 1e3, gf / t1, t2 * 1e3, gf / t2, t1 / t2);
}
int main(int argc, char** argv) {
  const int N = argc > 1 ? std::atoi(argv[1]) : 100;
  for (int r = 0; r < 2; ++r) {
    shape(16, 32, N);
    shape(32, 16, N);
    shape(64, 8, N);
  }
}
