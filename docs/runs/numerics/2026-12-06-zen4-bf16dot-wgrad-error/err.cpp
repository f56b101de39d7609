// worst |err| / sum|terms| and rms error / rms dw of the AVX512-BF16 weight gradient against double sums
#include <cifarnet/backend/onednn/bf16_wgrad.hpp>
#include <cifarnet/backend/host/bf16.hpp>
#include <cmath>
#include <cstdio>
#include <random>
using namespace cifarnet::backend;
using host::bf16_bits;
using host::bf16_to_float;
struct G {
  size_t n, ih, iw, ic, oc, kh, kw, pt, pl, pb, pr, sh, sw;
  size_t oh() const { return (ih + pt + pb - kh) / sh + 1; }
  size_t ow() const { return (iw + pl + pr - kw) / sw + 1; }
};
int main() {
  G gs[] = {{128, 32, 32, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1}, {128, 32, 32, 16, 32, 3, 3, 1, 1, 1, 1, 2, 2},
            {128, 16, 16, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1}, {128, 16, 16, 32, 64, 3, 3, 1, 1, 1, 1, 2, 2},
            {128, 8, 8, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1},   {500, 31, 31, 24, 64, 3, 3, 1, 1, 1, 1, 1, 1}};
  std::mt19937 r(7);
  std::normal_distribution<float> nd(0, 1);
  for (const G& g : gs) {
    std::vector<uint16_t> x(g.n * g.ih * g.iw * g.ic), dy(g.n * g.oh() * g.ow() * g.oc);
    for (auto& e : x) e = bf16_bits(std::max(0.f, nd(r)));  // post-ReLU activations
    for (auto& e : dy) e = bf16_bits(nd(r) * 1e-3f);
    onednn::bf16dot::WeightGrad wg(g.n, g.ih, g.iw, g.ic, g.oc, g.kh, g.kw, g.pt, g.pl, g.pb, g.pr, g.sh,
                                   g.sw);
    std::vector<float> dw(g.kh * g.kw * g.ic * g.oc);
    wg.run(x.data(), dy.data(), dw.data());
    std::vector<double> ref(dw.size()), ab(dw.size());
    std::vector<double> xf(x.size()), df(dy.size());
    for (size_t i = 0; i < x.size(); ++i) xf[i] = bf16_to_float(x[i]);
    for (size_t i = 0; i < dy.size(); ++i) df[i] = bf16_to_float(dy[i]);
    for (size_t n = 0; n < g.n; ++n)
      for (size_t y = 0; y < g.oh(); ++y)
        for (size_t xo = 0; xo < g.ow(); ++xo)
          for (size_t i = 0; i < g.kh; ++i)
            for (size_t j = 0; j < g.kw; ++j) {
              long yi = long(y * g.sh + i) - long(g.pt), xi = long(xo * g.sw + j) - long(g.pl);
              if (yi < 0 || yi >= long(g.ih) || xi < 0 || xi >= long(g.iw)) continue;
              const double* xs = &xf[((n * g.ih + yi) * g.iw + xi) * g.ic];
              const double* d = &df[((n * g.oh() + y) * g.ow() + xo) * g.oc];
              for (size_t c = 0; c < g.ic; ++c) {
                double* R = &ref[((i * g.kw + j) * g.ic + c) * g.oc];
                double* A = &ab[((i * g.kw + j) * g.ic + c) * g.oc];
                for (size_t o = 0; o < g.oc; ++o) {
                  double t = xs[c] * d[o];
                  R[o] += t;
                  A[o] += std::fabs(t);
                }
              }
            }
    double worst = 0, se = 0, sr = 0;
    for (size_t e = 0; e < dw.size(); ++e) {
      double err = std::fabs(dw[e] - ref[e]);
      worst = std::max(worst, err / ab[e]);
      se += err * err;
      sr += ref[e] * ref[e];
    }
    printf("n%zu %zux%zu %zu->%zu s%zu: worst |err|/sum|terms| %.2e (bound %.2e), rms err / rms dw %.2e\n",
           g.n, g.ih, g.iw, g.ic, g.oc, g.sh, worst, g.n * g.oh() * g.ow() * std::ldexp(1.0, -24),
           std::sqrt(se / sr));
  }
}
