#include <cstdio>
#include <vector>
#include <random>
#include <cstring>
#include "cifarnet/backend/onednn/bn_kernels.hpp"
using namespace cifarnet;
namespace bn = cifarnet::backend::onednn::bn;
int main() {
  const std::size_t CC = 16;
  ChannelGeom g{DataFormat::NHWC, 4, CC, 5, 7};
  const std::size_t N = g.size();
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  std::vector<float> x(N), dy(N), A(CC), B(CC), D(CC), m(CC);
  for (auto* v : {&x, &dy, &A, &B, &D, &m})
    for (auto& e : *v) e = d(rng);
  std::vector<float> o16(N), o0(N);
  bn::input_gradient<16>(g, x.data(), dy.data(), nullptr, m.data(), A.data(), B.data(), D.data(), o16.data());
  bn::input_gradient<0>(g, x.data(), dy.data(), nullptr, m.data(), A.data(), B.data(), D.data(), o0.data());
  int n16 = 0, v0 = 0, v1 = 0, v2 = 0, v3 = 0;
  for (std::size_t i = 0; i < N; ++i) {
    std::size_t c = i % CC;
    float a = A[c], b = B[c], dd = D[c], xm = x[i] - m[c], dv = dy[i];
    float r0 = std::fma(a, dv, b * xm) + dd;
    float r1 = std::fma(b, xm, a * dv) + dd;
    float r2 = (a * dv + b * xm) + dd;  // may be contracted by compiler!
    volatile float p = a * dv, q = b * xm;
    float r3 = (p + q) + dd;
    n16 += o16[i] != o0[i];
    v0 += r0 != o0[i];
    v1 += r1 != o0[i];
    v2 += r2 != o0[i];
    v3 += r3 != o0[i];
  }
  std::printf("N=%zu  <16> vs <0>: %d  V0: %d  V1: %d  expr: %d  nocontract: %d\n", N, n16, v0, v1, v2, v3);
}
