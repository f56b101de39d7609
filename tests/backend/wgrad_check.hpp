// What the tests of the own bf16 weight-gradient kernels share
// (test_amx_wgrad.cpp: amx::WeightGrad; test_bf16_wgrad.cpp:
// bf16dot::WeightGrad): a geometry, the sums in double on the same bf16
// values, the check of a kernel's dw against them, its bits across thread
// counts and runs, and the check on sampled outputs for geometries whose
// every output would take the double loop minutes.
//
// The error bound: the products of two bf16 values are exact in float, and
// both kernels add the K terms of an output (K = the output's pixel count)
// in float (AMX tiles or vector registers, chunk partials and their sum),
// so no term passes through more than K roundings of relative size 2^-24:
// |err| <= K * 2^-24 * sum|terms| (the usual recursive-summation bound, in
// its first-order form, which holds for K * 2^-24 << 1). Where the data
// have random signs that bound is loose against a lost share of the terms
// (it changes the sum by about sqrt(K) terms), so the large cases use
// non-negative data, where every term counts in full: a missed chunk (1/16
// of the terms) or a wrong offset (a border row or column, >= 1/32 of them)
// moves an output by more than 3 % of sum|terms|, far above K * 2^-24 (0.8
// % at 131,072 terms).
#pragma once

#include <catch2/catch.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cifarnet/backend/host/bf16.hpp>

#include "backend/amx_input_map.hpp"

namespace cifarnet::test::wgrad {

using backend::host::bf16_to_float;

struct Geom {
  std::size_t n, ih, iw, ic, oc, kh, kw, pt, pl, pb, pr;
  std::size_t sh = 1, sw = 1;
  std::size_t oh() const { return (ih + pt + pb - kh) / sh + 1; }
  std::size_t ow() const { return (iw + pl + pr - kw) / sw + 1; }
  std::string name() const {
    std::ostringstream s;
    s << "n" << n << " " << ih << "x" << iw << " " << ic << "->" << oc << " k" << kh << "x" << kw << " pad "
      << pt << "/" << pl << "/" << pb << "/" << pr << " stride " << sh << "/" << sw;
    return s.str();
  }
  template <class K>
  K make() const {
    return K(n, ih, iw, ic, oc, kh, kw, pt, pl, pb, pr, sh, sw);
  }
  std::size_t x_size() const { return n * ih * iw * ic; }
  std::size_t dy_size() const { return n * oh() * ow() * oc; }
  template <class K>
  bool supported() const {
    return K::supported(n, ih, iw, ic, oc, kh, kw, pt, pl, pb, pr, sh, sw);
  }
};

// Toy geometries: paddings 0, 1, 2 and uneven, 1x1, 3x3, 5x5, 1x7 and 7x1
// kernels, non-square images, 8 to 64 channels (8, 24 and 40: not
// multiples of 16), batches of 1 to 20.
inline const Geom kToys[] = {
    {2, 5, 7, 16, 16, 3, 3, 1, 1, 1, 1},
    {3, 6, 4, 32, 48, 3, 3, 0, 0, 0, 0},
    {1, 9, 9, 64, 16, 1, 1, 0, 0, 0, 0},
    {2, 8, 8, 16, 32, 3, 3, 1, 1, 1, 1},
    {3, 7, 5, 48, 32, 3, 3, 1, 1, 1, 1},
    {2, 5, 5, 16, 16, 3, 3, 2, 0, 1, 2},
    {1, 3, 11, 32, 16, 3, 1, 1, 0, 1, 0},
    {2, 6, 6, 16, 64, 1, 3, 0, 1, 0, 1},
    {3, 4, 4, 64, 64, 3, 3, 1, 1, 1, 1},
    {20, 6, 5, 16, 16, 3, 3, 1, 1, 1, 1},
    {20, 4, 4, 32, 16, 3, 3, 1, 1, 1, 1},
    {1, 1, 1, 16, 16, 1, 1, 0, 0, 0, 0},
    {2, 2, 3, 16, 16, 3, 3, 2, 2, 2, 2},
    // input channels padded to a multiple of 16 in the kernel
    {2, 5, 7, 8, 16, 3, 3, 1, 1, 1, 1},
    {3, 6, 5, 24, 32, 3, 3, 1, 1, 1, 1},
    {20, 4, 4, 24, 16, 3, 3, 1, 1, 1, 1},
    {2, 5, 5, 40, 48, 3, 3, 0, 1, 1, 0},
    {1, 3, 3, 8, 16, 1, 1, 0, 0, 0, 0},
    // More than six offsets of one dy parity: several groups of each.
    {2, 6, 7, 32, 16, 5, 5, 2, 2, 2, 2},
    {1, 7, 7, 16, 16, 5, 5, 2, 2, 2, 2},
    {2, 9, 4, 16, 32, 7, 1, 3, 0, 3, 0},
    {2, 4, 9, 24, 48, 1, 7, 0, 3, 0, 3},
};

// Strided toys: ResNet's stride-2 3x3 with padding 1, padding 0 and uneven
// paddings, odd image sizes, a 1x1 stride-2 kernel, stride 3 and mixed
// strides.
inline const Geom kStridedToys[] = {
    {2, 8, 8, 16, 32, 3, 3, 1, 1, 1, 1, 2, 2},  {3, 7, 9, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2},
    {2, 8, 8, 32, 16, 3, 3, 0, 0, 0, 0, 2, 2},  {3, 9, 7, 16, 32, 3, 3, 0, 0, 0, 0, 2, 2},
    {2, 6, 7, 16, 16, 3, 3, 0, 1, 1, 0, 2, 2},  {2, 6, 6, 16, 16, 3, 3, 1, 0, 0, 1, 2, 2},
    {2, 5, 5, 16, 48, 3, 3, 2, 2, 2, 2, 2, 2},  {3, 7, 5, 32, 16, 1, 1, 0, 0, 0, 0, 2, 2},
    {2, 10, 8, 16, 16, 3, 3, 1, 1, 1, 1, 3, 3}, {2, 9, 10, 16, 32, 3, 3, 1, 1, 1, 1, 2, 1},
    {20, 6, 6, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2}, {20, 8, 8, 32, 64, 3, 3, 1, 1, 1, 1, 2, 2},
    {1, 1, 1, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2},  {1, 2, 3, 16, 16, 1, 1, 0, 0, 0, 0, 2, 2},
    {3, 8, 8, 24, 32, 3, 3, 1, 1, 1, 1, 2, 2},  {2, 7, 9, 8, 16, 3, 3, 1, 1, 1, 1, 2, 2},
};

struct Reference {
  std::vector<double> sum, abs;  // HWIO
};

// The double sums, and the sums of |terms|, of every output.
inline Reference reference(const Geom& g, const std::vector<std::uint16_t>& x,
                           const std::vector<std::uint16_t>& dy) {
  const std::size_t oh = g.oh(), ow = g.ow();
  std::vector<double> xf(x.size()), df(dy.size());
  for (std::size_t i = 0; i < x.size(); ++i) xf[i] = bf16_to_float(x[i]);
  for (std::size_t i = 0; i < dy.size(); ++i) df[i] = bf16_to_float(dy[i]);
  Reference r{std::vector<double>(g.kh * g.kw * g.ic * g.oc), std::vector<double>(g.kh * g.kw * g.ic * g.oc)};
  for (std::size_t n = 0; n < g.n; ++n)
    for (std::size_t y = 0; y < oh; ++y)
      for (std::size_t xo = 0; xo < ow; ++xo) {
        const double* d = &df[((n * oh + y) * ow + xo) * g.oc];
        for (std::size_t i = 0; i < g.kh; ++i) {
          const long yi = long(y * g.sh + i) - long(g.pt);
          if (yi < 0 || yi >= long(g.ih)) continue;
          for (std::size_t j = 0; j < g.kw; ++j) {
            const long xi = long(xo * g.sw + j) - long(g.pl);
            if (xi < 0 || xi >= long(g.iw)) continue;
            const double* xs = &xf[((n * g.ih + std::size_t(yi)) * g.iw + std::size_t(xi)) * g.ic];
            for (std::size_t c = 0; c < g.ic; ++c) {
              double* s = &r.sum[((i * g.kw + j) * g.ic + c) * g.oc];
              double* a = &r.abs[((i * g.kw + j) * g.ic + c) * g.oc];
              for (std::size_t o = 0; o < g.oc; ++o) {
                s[o] += xs[c] * d[o];
                a[o] += std::fabs(xs[c] * d[o]);
              }
            }
          }
        }
      }
  return r;
}

// Runs the kernel on random data and compares with the reference; returns
// dw.
template <class K>
std::vector<float> check_against_reference(const Geom& g, bool non_negative, unsigned seed) {
  INFO(g.name() << (non_negative ? ", non-negative data" : ", signed data"));
  REQUIRE(g.supported<K>());
  const auto x = random_bf16(g.n * g.ih * g.iw * g.ic, non_negative, seed);
  const auto dy = random_bf16(g.n * g.oh() * g.ow() * g.oc, non_negative, seed + 1);
  K wg = g.make<K>();
  std::vector<float> dw(g.kh * g.kw * g.ic * g.oc, -7.0f);  // overwritten
  wg.run(x.data(), dy.data(), dw.data());
  const Reference r = reference(g, x, dy);
  const double terms = double(g.n * g.oh() * g.ow());
  const double rel = terms * std::ldexp(1.0, -24);
  std::size_t bad = 0, first_bad = 0;
  double worst = 0;
  for (std::size_t e = 0; e < dw.size(); ++e) {
    const double err = std::fabs(double(dw[e]) - r.sum[e]), bound = rel * r.abs[e];
    if (!(err <= bound)) {
      if (bad++ == 0) first_bad = e;
    }
    if (r.abs[e] > 0) worst = std::max(worst, err / r.abs[e]);
  }
  INFO("worst |err| / sum|terms| " << worst << ", bound " << rel);
  INFO("first output out of bounds: " << first_bad << " = " << dw[first_bad] << ", double "
                                      << r.sum[first_bad]);
  CHECK(bad == 0);
  return dw;
}

template <class K>
std::vector<float> run_with_threads(const Geom& g, int threads, const std::vector<std::uint16_t>& x,
                                    const std::vector<std::uint16_t>& dy, int runs) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  K wg = g.make<K>();
  std::vector<float> dw(g.kh * g.kw * g.ic * g.oc), again(dw.size());
  wg.run(x.data(), dy.data(), dw.data());
  for (int r = 1; r < runs; ++r) {
    wg.run(x.data(), dy.data(), again.data());
    CHECK(std::memcmp(dw.data(), again.data(), dw.size() * sizeof(float)) == 0);
  }
  omp_set_num_threads(before);
  return dw;
}

// check_against_reference on each geometry of `list`, with signed and then
// non-negative data, the seed advanced by 2 before each.
template <class K, class List>
void check_all(const List& list, unsigned& seed) {
  for (const Geom& g : list) {
    check_against_reference<K>(g, false, seed += 2);
    check_against_reference<K>(g, true, seed += 2);
  }
}

// The same bits for 1, 2 and 3 threads and on repeated runs, on random
// signed data, for each geometry of `list`.
template <class K, class List>
void check_thread_bits(const List& list, unsigned seed) {
  for (const Geom& g : list) {
    INFO(g.name());
    const auto x = random_bf16(g.x_size(), false, seed += 2);
    const auto dy = random_bf16(g.dy_size(), false, seed += 2);
    const auto one = run_with_threads<K>(g, 1, x, dy, 2);
    const auto two = run_with_threads<K>(g, 2, x, dy, 3);
    const auto three = run_with_threads<K>(g, 3, x, dy, 2);
    CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)) == 0);
  }
}

// dw at sampled outputs (corners, the centre tap, 300 random ones) against
// each sample's double sum over every pixel, with the bound above.
template <class K>
void check_sampled(const Geom& g, K& wg, unsigned seed) {
  INFO(g.name());
  const auto x = random_bf16(g.x_size(), true, seed);
  const auto dy = random_bf16(g.dy_size(), true, seed + 2);
  std::vector<float> dw(g.kh * g.kw * g.ic * g.oc, -7.0f);
  wg.run(x.data(), dy.data(), dw.data());
  std::mt19937 rng(seed + 4);
  std::uniform_int_distribution<std::size_t> pick(0, dw.size() - 1);
  std::vector<std::size_t> samples{0, dw.size() - 1, (g.kh / 2 * g.kw + g.kw / 2) * g.ic * g.oc + 17};
  for (int k = 0; k < 300; ++k) samples.push_back(pick(rng));
  const double rel = double(g.n * g.oh() * g.ow()) * std::ldexp(1.0, -24);
  std::size_t bad = 0, first_bad = 0;
  double first_sum = 0;
  for (const std::size_t e : samples) {
    const std::size_t o = e % g.oc, c = e / g.oc % g.ic, tap = e / (g.oc * g.ic), i = tap / g.kw,
                      j = tap % g.kw;
    double sum = 0, abs = 0;
    for (std::size_t n = 0; n < g.n; ++n)
      for (std::size_t y = 0; y < g.oh(); ++y)
        for (std::size_t xo = 0; xo < g.ow(); ++xo) {
          const long yi = long(y * g.sh + i) - long(g.pt), xi = long(xo * g.sw + j) - long(g.pl);
          if (yi < 0 || yi >= long(g.ih) || xi < 0 || xi >= long(g.iw)) continue;
          const double t =
              double(bf16_to_float(x[((n * g.ih + std::size_t(yi)) * g.iw + std::size_t(xi)) * g.ic + c])) *
              double(bf16_to_float(dy[((n * g.oh() + y) * g.ow() + xo) * g.oc + o]));
          sum += t;
          abs += std::fabs(t);
        }
    if (!(std::fabs(double(dw[e]) - sum) <= rel * abs) && bad++ == 0) {
      first_bad = e;
      first_sum = sum;
    }
  }
  INFO("first sample out of bounds: output " << first_bad << " = " << dw[first_bad] << ", double "
                                             << first_sum);
  CHECK(bad == 0);
}

}  // namespace cifarnet::test::wgrad
