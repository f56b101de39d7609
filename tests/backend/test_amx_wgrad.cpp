// The AMX weight gradient of convolutions (backend/onednn/amx_wgrad.hpp)
// against the same sums in double on the same bf16 values, at toy
// geometries (padding 0, 1 and uneven, 1x1 and 3x3 kernels, non-square
// images, 16 to 64 channels, batches of 1 to 20 whose chunks and blocks come
// out uneven, strides 1, 2 and 3; 8, 24 and 40 input channels, whose last
// block of 16 is half padding), at ResNet-20's five 3x3 geometries at batch
// 128 (three of stride 1, two of stride 2), at airbench94's 24 -> 64 at a
// smaller batch, and on sampled outputs at airbench94's 256 -> 256 at 3x3
// and batch 500 (blocks of 1 MiB); and its bits, which must
// not depend on the number of OpenMP threads nor change from run to run. On a CPU or OS
// without AMX every case prints "SKIPPED: ..." and ctest reports it as
// skipped (tests/backend/CMakeLists.txt).
//
// The error bound: the products of two bf16 values are exact in float, and
// the kernel adds the K terms of an output (K = the output's pixel count) in
// float, in tiles, chunk partials and their sum, so no term passes through
// more than K roundings of relative size 2^-24: |err| <= K * 2^-24 * sum|terms|
// (the usual recursive-summation bound, in its first-order form, which holds
// for K * 2^-24 << 1). Where the data have random signs that bound is loose
// against a lost share of the terms (it changes the sum by about sqrt(K)
// terms), so the large cases use non-negative data, where every term counts
// in full: a missed chunk (1/16 of the terms) or a wrong offset (a border
// row or column, >= 1/32 of them) moves an output by more than 3 % of
// sum|terms|, far above K * 2^-24 (0.8 % at 131,072 terms). Checked when the
// kernel was written: shifting one offset by a pixel, or skipping a chunk,
// fails both kinds of case; for the strides, reading every phase from
// column 0 of x (dropping the phase's first column) fails the strided cases.
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
#include <cifarnet/backend/onednn/amx_wgrad.hpp>

#include "backend/amx_input_map.hpp"

namespace amx = cifarnet::backend::onednn::amx;
using cifarnet::backend::host::bf16_bits;
using cifarnet::backend::host::bf16_to_float;

namespace {

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
  amx::WeightGrad make() const { return amx::WeightGrad(n, ih, iw, ic, oc, kh, kw, pt, pl, pb, pr, sh, sw); }
  std::size_t x_size() const { return n * ih * iw * ic; }
  std::size_t dy_size() const { return n * oh() * ow() * oc; }
  bool supported() const {
    return amx::WeightGrad::supported(n, ih, iw, ic, oc, kh, kw, pt, pl, pb, pr, sh, sw);
  }
};

bool skip_without_amx() {
  if (amx::amx_available()) return false;
  WARN("SKIPPED: no AMX here (CPUID has no AMX-TILE/AMX-BF16/AVX-512BW, or Linux refused the tile data)");
  return true;
}

struct Reference {
  std::vector<double> sum, abs;  // HWIO
};

// The double sums, and the sums of |terms|, of every output.
Reference reference(const Geom& g, const std::vector<std::uint16_t>& x,
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
std::vector<float> check_against_reference(const Geom& g, bool non_negative, unsigned seed) {
  INFO(g.name() << (non_negative ? ", non-negative data" : ", signed data"));
  REQUIRE(g.supported());
  const auto x = cifarnet::test::random_bf16(g.n * g.ih * g.iw * g.ic, non_negative, seed);
  const auto dy = cifarnet::test::random_bf16(g.n * g.oh() * g.ow() * g.oc, non_negative, seed + 1);
  amx::WeightGrad wg = g.make();
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

std::vector<float> run_with_threads(const Geom& g, int threads, const std::vector<std::uint16_t>& x,
                                    const std::vector<std::uint16_t>& dy, int runs) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  amx::WeightGrad wg = g.make();
  std::vector<float> dw(g.kh * g.kw * g.ic * g.oc), again(dw.size());
  wg.run(x.data(), dy.data(), dw.data());
  for (int r = 1; r < runs; ++r) {
    wg.run(x.data(), dy.data(), again.data());
    CHECK(std::memcmp(dw.data(), again.data(), dw.size() * sizeof(float)) == 0);
  }
  omp_set_num_threads(before);
  return dw;
}

const Geom kResnet[] = {{128, 32, 32, 16, 16, 3, 3, 1, 1, 1, 1},
                        {128, 16, 16, 32, 32, 3, 3, 1, 1, 1, 1},
                        {128, 8, 8, 64, 64, 3, 3, 1, 1, 1, 1}};

}  // namespace

TEST_CASE(
    "amx weight gradient supports stride-1 geometries with input channels in multiples of 8 and output "
    "channels in multiples of 16",
    "[amx]") {
  CHECK(amx::WeightGrad::supported(128, 32, 32, 16, 16, 3, 3, 1, 1, 1, 1));
  CHECK(amx::WeightGrad::supported(2, 5, 7, 48, 32, 1, 1, 0, 0, 0, 0));
  CHECK_FALSE(amx::WeightGrad::supported(128, 32, 32, 3, 16, 3, 3, 1, 1, 1, 1));   // 3 input channels
  CHECK_FALSE(amx::WeightGrad::supported(128, 32, 32, 16, 24, 3, 3, 1, 1, 1, 1));  // 24 output channels
  CHECK_FALSE(amx::WeightGrad::supported(1, 2, 2, 16, 16, 5, 5, 1, 1, 1, 1));      // no output pixel
  CHECK(amx::WeightGrad::supported(500, 31, 31, 24, 64, 3, 3, 1, 1, 1, 1));        // airbench94's 24 -> 64
  CHECK(amx::WeightGrad::supported(2, 5, 5, 8, 16, 3, 3, 1, 1, 1, 1));             // 8 input channels
  CHECK_FALSE(amx::WeightGrad::supported(2, 5, 5, 12, 16, 3, 3, 1, 1, 1, 1));      // 12: not a multiple of 8
  CHECK_THROWS_AS(amx::WeightGrad(1, 4, 4, 12, 16, 3, 3, 1, 1, 1, 1), cifarnet::BackendError);
}

TEST_CASE("amx weight gradient agrees with double sums at toy geometries", "[amx]") {
  if (skip_without_amx()) return;
  const Geom toys[] = {
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
  unsigned seed = 11;
  for (const Geom& g : toys) {
    check_against_reference(g, false, seed += 2);
    check_against_reference(g, true, seed += 2);
  }
}

TEST_CASE("amx weight gradient agrees with double sums at the ResNet-20 geometries at batch 128", "[amx]") {
  if (skip_without_amx()) return;
  unsigned seed = 101;
  for (const Geom& g : kResnet) check_against_reference(g, true, seed += 2);
}

// Strided convolutions run as one stride-1 product per kernel offset over a
// phase of x (every s-th pixel of every s-th row, amx_wgrad.hpp): ResNet's
// stride-2 3x3 with padding 1 (its four phases take 2x2, 2x1, 1x2 and 1x1
// sub-kernels), padding 0 and uneven paddings, odd image sizes (phases of
// unequal sizes, input rows or columns no output reads), a 1x1 stride-2
// kernel (one phase in use), stride 3 and mixed strides.
const Geom kResnetStrided[] = {{128, 32, 32, 16, 32, 3, 3, 1, 1, 1, 1, 2, 2},
                               {128, 16, 16, 32, 64, 3, 3, 1, 1, 1, 1, 2, 2}};

TEST_CASE("amx weight gradient supports strided geometries", "[amx]") {
  CHECK(kResnetStrided[0].supported());
  CHECK(kResnetStrided[1].supported());
  CHECK(amx::WeightGrad::supported(2, 7, 5, 16, 16, 1, 1, 0, 0, 0, 0, 2, 3));
  CHECK_FALSE(amx::WeightGrad::supported(2, 7, 5, 16, 16, 3, 3, 1, 1, 1, 1, 0, 2));  // stride 0
  CHECK_FALSE(amx::WeightGrad::supported(2, 7, 5, 16, 24, 3, 3, 1, 1, 1, 1, 2, 2));  // 24 output channels
}

TEST_CASE("amx weight gradient of strided convolutions agrees with double sums at toy geometries", "[amx]") {
  if (skip_without_amx()) return;
  const Geom toys[] = {
      {2, 8, 8, 16, 32, 3, 3, 1, 1, 1, 1, 2, 2},  {3, 7, 9, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2},
      {2, 8, 8, 32, 16, 3, 3, 0, 0, 0, 0, 2, 2},  {3, 9, 7, 16, 32, 3, 3, 0, 0, 0, 0, 2, 2},
      {2, 6, 7, 16, 16, 3, 3, 0, 1, 1, 0, 2, 2},  {2, 6, 6, 16, 16, 3, 3, 1, 0, 0, 1, 2, 2},
      {2, 5, 5, 16, 48, 3, 3, 2, 2, 2, 2, 2, 2},  {3, 7, 5, 32, 16, 1, 1, 0, 0, 0, 0, 2, 2},
      {2, 10, 8, 16, 16, 3, 3, 1, 1, 1, 1, 3, 3}, {2, 9, 10, 16, 32, 3, 3, 1, 1, 1, 1, 2, 1},
      {20, 6, 6, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2}, {20, 8, 8, 32, 64, 3, 3, 1, 1, 1, 1, 2, 2},
      {1, 1, 1, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2},  {1, 2, 3, 16, 16, 1, 1, 0, 0, 0, 0, 2, 2},
      {3, 8, 8, 24, 32, 3, 3, 1, 1, 1, 1, 2, 2},  {2, 7, 9, 8, 16, 3, 3, 1, 1, 1, 1, 2, 2},
  };
  unsigned seed = 301;
  for (const Geom& g : toys) {
    check_against_reference(g, false, seed += 2);
    check_against_reference(g, true, seed += 2);
  }
}

TEST_CASE(
    "amx weight gradient of strided convolutions agrees with double sums at the ResNet-20 stride-2 "
    "geometries at batch 128",
    "[amx]") {
  if (skip_without_amx()) return;
  unsigned seed = 401;
  for (const Geom& g : kResnetStrided) {
    check_against_reference(g, true, seed += 2);
    check_against_reference(g, false, seed += 2);
  }
}

TEST_CASE("amx weight gradient gives the same bits for 1 2 and 3 threads and on every run (strided too)",
          "[amx]") {
  if (skip_without_amx()) return;
  const Geom cases[] = {kResnet[0],
                        kResnet[2],
                        {20, 6, 5, 16, 16, 3, 3, 1, 1, 1, 1},
                        {3, 7, 5, 48, 32, 3, 3, 1, 1, 1, 1},
                        kResnetStrided[0],
                        kResnetStrided[1],
                        {20, 9, 7, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2},
                        {20, 9, 9, 24, 64, 3, 3, 1, 1, 1, 1}};
  unsigned seed = 201;
  for (const Geom& g : cases) {
    INFO(g.name());
    const auto x = cifarnet::test::random_bf16(g.n * g.ih * g.iw * g.ic, false, seed += 2);
    const auto dy = cifarnet::test::random_bf16(g.n * g.oh() * g.ow() * g.oc, false, seed += 2);
    const auto one = run_with_threads(g, 1, x, dy, 2);
    const auto two = run_with_threads(g, 2, x, dy, 3);
    const auto three = run_with_threads(g, 3, x, dy, 2);
    CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("amx weight gradient agrees with double sums at airbench94's 24 -> 64 (input channels padded)",
          "[amx]") {
  if (skip_without_amx()) return;
  const Geom g{20, 31, 31, 24, 64, 3, 3, 1, 1, 1, 1};
  check_against_reference(g, true, 501);
  check_against_reference(g, false, 503);
}

// Where a 640 KiB block holds fewer than 1,024 input positions the kernel
// takes blocks of up to 1 MiB (amx_wgrad.hpp): airbench94's 256 -> 256 at
// 7x7 and 3x3, batch 500. The 3x3 one is checked on sampled outputs (every
// output would take the double loop minutes under the sanitizers): each
// sample's double sum over all 500 * 9 pixels, with the bound of the full
// cases.
TEST_CASE("amx weight gradient with 1 MiB blocks agrees with double sums on sampled outputs", "[amx]") {
  CHECK(amx::WeightGrad(500, 15, 15, 64, 64, 3, 3, 1, 1, 1, 1).block_images() == 9);   // 640 KiB: 10, evened
  CHECK(amx::WeightGrad(500, 7, 7, 256, 256, 3, 3, 1, 1, 1, 1).block_images() == 16);  // 1 MiB
  const Geom g{500, 3, 3, 256, 256, 3, 3, 1, 1, 1, 1};
  amx::WeightGrad wg = g.make();
  CHECK(wg.block_images() == 63);  // a whole chunk (500 / 8 images) within 1 MiB
  if (skip_without_amx()) return;
  const auto x = cifarnet::test::random_bf16(g.x_size(), true, 601);
  const auto dy = cifarnet::test::random_bf16(g.dy_size(), true, 603);
  std::vector<float> dw(g.kh * g.kw * g.ic * g.oc, -7.0f);
  wg.run(x.data(), dy.data(), dw.data());
  std::mt19937 rng(605);
  std::uniform_int_distribution<std::size_t> pick(0, dw.size() - 1);
  std::vector<std::size_t> samples{0, dw.size() - 1, 4 * g.ic * g.oc + 17};  // corners and the centre tap
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
          const long yi = long(y + i) - 1, xi = long(xo + j) - 1;
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

TEST_CASE("amx weight gradient with an input map gives the bits of the map applied to x first", "[amx]") {
  if (skip_without_amx()) return;
  if (!amx::avx512_bf16_available()) {
    WARN("SKIPPED: no AVX512-BF16 here (the input map's rounding)");
    return;
  }
  // Stride 1 and 2, 16 to 64 channels, a batch whose chunks come out uneven;
  // with and without the ReLU.
  const Geom cases[] = {{13, 6, 5, 16, 16, 3, 3, 1, 1, 1, 1},
                        {9, 8, 8, 32, 32, 3, 3, 1, 1, 1, 1},
                        {5, 4, 6, 64, 32, 3, 3, 1, 1, 1, 1},
                        {7, 9, 7, 16, 32, 3, 3, 1, 1, 1, 1, 2, 2}};
  unsigned seed = 601;
  for (const Geom& g : cases)
    for (const bool relu : {true, false}) {
      INFO(g.name() << (relu ? ", ReLU" : ", no ReLU"));
      const auto y = cifarnet::test::random_bf16(g.x_size(), false, seed += 2);
      const auto dy = cifarnet::test::random_bf16(g.dy_size(), false, seed += 2);
      const cifarnet::test::HostMap host(g.ic);
      const auto x = host.apply(y, relu);
      const amx::InputMap map{host.scale.data(), host.shift.data(), relu};
      amx::WeightGrad mapped = g.make(), plain = g.make();
      std::vector<float> dw_mapped(g.kh * g.kw * g.ic * g.oc, -7.0f), dw_plain(dw_mapped.size(), 7.0f);
      mapped.run(y.data(), &map, dy.data(), dw_mapped.data());
      plain.run(x.data(), dy.data(), dw_plain.data());
      CHECK(std::memcmp(dw_mapped.data(), dw_plain.data(), dw_plain.size() * sizeof(float)) == 0);
    }
  amx::WeightGrad wg = cases[0].make();
  std::vector<std::uint16_t> x(cases[0].x_size()), dy(cases[0].dy_size());
  std::vector<float> dw(9 * 16 * 16), scale(16, 1.0f);
  const amx::InputMap half{scale.data(), nullptr, true};
  CHECK_THROWS_WITH(wg.run(x.data(), &half, dy.data(), dw.data()), Catch::Contains("without scale or shift"));
}
