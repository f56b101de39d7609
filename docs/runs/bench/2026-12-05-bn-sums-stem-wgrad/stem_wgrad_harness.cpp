#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include "cifarnet/backend/onednn/bn_kernels.hpp"
using namespace cifarnet;
namespace on = cifarnet::backend::onednn;
static std::vector<float> junk(48u << 20);
template <class F>
double timeit(F&& f, bool cold) {
  std::vector<double> t;
  for (int r = 0; r < 31; ++r) {
    if (cold)
      for (auto& v : junk) v += 1.f;
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[15];
}
int main() {
  const std::size_t n = 128, h = 32, C = 16, px = n * h * h, el = px * C;
  std::vector<std::uint16_t> x(el), dy(el);
  std::vector<float> cx(px * 3), dx(el), dw(27 * 16), dwr(27 * 16, 0.f), part;
  for (std::size_t i = 0; i < el; ++i) {
    x[i] = 0x3f80 + (i * 7 % 13) * 16;
    dy[i] = 0x3a00 + (i * 5 % 11) * 32;
  }
  for (std::size_t i = 0; i < px * 3; ++i) cx[i] = float((i * 13) % 17) / 17.f - 0.5f;
  std::vector<float> ab(2 * C), m(C, 1.f), A(C, 0.7f), B(C, 0.1f), D(C, -0.01f);
  for (std::size_t c = 0; c < C; ++c) {
    ab[c] = 1.f;
    ab[C + c] = -1.1f;
  }
  const ChannelGeom cg{DataFormat::NHWC, n, C, h, h};
  for (int cold = 0; cold < 2; ++cold) {
    double f = timeit(
        [&] {
          on::bn::input_gradient_into_weight_gradient<3>(cg, x.data(), dy.data(), ab.data(), m.data(),
                                                         A.data(), B.data(), D.data(), cx.data(), part,
                                                         dw.data());
        },
        cold);
    double g = timeit(
        [&] {
          on::bn::input_gradient<16>(cg, x.data(), dy.data(), ab.data(), m.data(), A.data(), B.data(),
                                     D.data(), dx.data());
        },
        cold);
    std::printf("%s: fused %.3f ms; input_gradient (float dx) alone %.3f ms\n", cold ? "cold" : "warm", f, g);
  }
  // reference dW in double from the stored dx
  on::bn::input_gradient<16>(cg, x.data(), dy.data(), ab.data(), m.data(), A.data(), B.data(), D.data(),
                             dx.data());
  std::vector<double> ref(27 * 16, 0.0);
  for (std::size_t im = 0; im < n; ++im)
    for (std::size_t y = 0; y < h; ++y)
      for (std::size_t xx = 0; xx < h; ++xx)
        for (int i = 0; i < 3; ++i)
          for (int j = 0; j < 3; ++j) {
            long yy = long(y) + i - 1, xs = long(xx) + j - 1;
            if (yy < 0 || xs < 0 || yy >= long(h) || xs >= long(h)) continue;
            for (int c = 0; c < 3; ++c)
              for (std::size_t o = 0; o < 16; ++o)
                ref[((i * 3 + j) * 3 + c) * 16 + o] +=
                    double(dx[((im * h + y) * h + xx) * 16 + o]) * cx[((im * h + yy) * h + xs) * 3 + c];
          }
  double e = 0, mx = 0;
  for (std::size_t k = 0; k < ref.size(); ++k) {
    e = std::max(e, std::abs(ref[k] - dw[k]));
    mx = std::max(mx, std::abs(ref[k]));
  }
  std::printf("max |dw - ref| %.3g of max |ref| %.3g\n", e, mx);
}
