// The own AMX forward 3x3 convolution (backend/onednn/amx_conv.hpp) against
// the same sums in double on the same bf16 values: 16 input channels (taps
// paired in K) and multiples of 32, 16 output channels (4x1 tiles) and
// multiples of 32 (2x2), images from 1x1 to ResNet's 32x32, batches whose
// last group of 8 images is short; its output statistics against double sums
// of its own outputs; the input map against the same map applied first; its
// bits, which must not depend on the number of OpenMP threads; and the
// geometries it refuses. On a CPU or OS without AMX or AVX512-BF16 every case
// prints "SKIPPED: ..." and ctest reports it as skipped
// (tests/backend/CMakeLists.txt).
//
// The error bound: each product of two bf16 values is exact in float; the
// kernel adds an output's K terms (K = 9 * input channels, fewer at the
// borders) in float tiles, so |sum - exact| <= K * 2^-24 * sum|terms|, and
// the rounding to bf16 adds at most half a bf16 unit, 2^-8 * |value| (8
// significant bits). Non-negative data make every term count in full: a
// wrong tap shift or a lost tap moves an output by a ninth or more of
// sum|terms|. Checked when the kernel was written: one tap shifted by a
// column (84 failed assertions), the 16-channel taps' second pixel's
// weights left at zero (42), and the second image's first row stacked one
// pixel off (126) each fail.
#include <catch2/catch.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cifarnet/backend/host/bf16.hpp>
#include <cifarnet/backend/onednn/amx_conv.hpp>

#include "backend/amx_input_map.hpp"

namespace amx = cifarnet::backend::onednn::amx;
using cifarnet::backend::host::bf16_bits;
using cifarnet::backend::host::bf16_to_float;

namespace {

bool skip_without_amx_bf16() {
  if (amx::amx_available() && amx::avx512_bf16_available()) return false;
  WARN("SKIPPED: no AMX or AVX512-BF16 here (CPUID, or Linux refused the tile data)");
  return true;
}

struct Shape {
  std::size_t n, h, w, ic, oc;
  std::string name() const {
    std::ostringstream s;
    s << "n" << n << " " << h << "x" << w << " " << ic << "->" << oc;
    return s.str();
  }
};

// Float weights already on bf16 values (the kernel rounds them; these need
// no rounding), HWIO.
std::vector<float> random_weights(const Shape& s, bool non_negative, unsigned seed) {
  const auto bits = cifarnet::test::random_bf16(9 * s.ic * s.oc, non_negative, seed);
  std::vector<float> w(bits.size());
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = bf16_to_float(bits[i]);
  return w;
}

// Double sums and sums of |terms| of every output, NHWC.
void reference(const Shape& s, const std::vector<std::uint16_t>& x, const std::vector<float>& w,
               std::vector<double>& sum, std::vector<double>& abs) {
  sum.assign(s.n * s.h * s.w * s.oc, 0.0);
  abs.assign(sum.size(), 0.0);
  for (std::size_t m = 0; m < s.n; ++m)
    for (std::size_t y = 0; y < s.h; ++y)
      for (std::size_t xo = 0; xo < s.w; ++xo) {
        double* out = &sum[((m * s.h + y) * s.w + xo) * s.oc];
        double* out_abs = &abs[((m * s.h + y) * s.w + xo) * s.oc];
        for (std::size_t i = 0; i < 3; ++i) {
          const long yi = long(y + i) - 1;
          if (yi < 0 || yi >= long(s.h)) continue;
          for (std::size_t j = 0; j < 3; ++j) {
            const long xi = long(xo + j) - 1;
            if (xi < 0 || xi >= long(s.w)) continue;
            const std::uint16_t* px = &x[((m * s.h + std::size_t(yi)) * s.w + std::size_t(xi)) * s.ic];
            for (std::size_t c = 0; c < s.ic; ++c) {
              const double xv = bf16_to_float(px[c]);
              const float* wr = &w[((i * 3 + j) * s.ic + c) * s.oc];
              for (std::size_t o = 0; o < s.oc; ++o) {
                out[o] += xv * double(wr[o]);
                out_abs[o] += std::fabs(xv * double(wr[o]));
              }
            }
          }
        }
      }
}

struct Run {
  std::vector<std::uint16_t> y;
  std::vector<double> stats;
};

Run run_kernel(const Shape& s, const std::vector<std::uint16_t>& x, const std::vector<float>& w,
               const amx::InputMap* map = nullptr) {
  amx::Forward3x3 k(s.n, s.h, s.w, s.ic, s.oc);
  k.set_weights(w.data());
  Run r{std::vector<std::uint16_t>(s.n * s.h * s.w * s.oc, 0xFFFFu), std::vector<double>(2 * s.oc, -1.0)};
  k.run(x.data(), map, r.y.data(), r.stats.data());
  return r;
}

void check_shape(const Shape& s, bool non_negative, unsigned seed) {
  INFO(s.name() << (non_negative ? ", non-negative data" : ", signed data"));
  REQUIRE(amx::Forward3x3::why_not(s.n, s.h, s.w, s.ic, s.oc).empty());
  const auto x = cifarnet::test::random_bf16(s.n * s.h * s.w * s.ic, non_negative, seed);
  const auto w = random_weights(s, non_negative, seed + 1);
  const Run r = run_kernel(s, x, w);
  std::vector<double> sum, abs;
  reference(s, x, w, sum, abs);
  const double k = 9.0 * double(s.ic);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < sum.size(); ++i) {
    const double got = bf16_to_float(r.y[i]);
    const double bound = k * std::ldexp(abs[i], -24) + std::ldexp(std::fabs(sum[i]), -8) * 1.0001 + 1e-30;
    if (!(std::fabs(got - sum[i]) <= bound) && ++bad <= 5) {
      INFO("output " << i << ": " << got << " against " << sum[i] << " (bound " << bound << ")");
      CHECK(std::fabs(got - sum[i]) <= bound);
    }
  }
  CHECK(bad == 0);
  // The statistics: double sums of the kernel's own bf16 outputs; the
  // kernel sums a group's (8 images') values in float, so each group's sum
  // is within (its count) * 2^-24 of the sum of its |values|.
  std::vector<double> ref(2 * s.oc, 0.0), mag(2 * s.oc, 0.0);
  for (std::size_t i = 0; i < r.y.size(); ++i) {
    const double v = bf16_to_float(r.y[i]);
    const std::size_t c = i % s.oc;
    ref[c] += v;
    mag[c] += std::fabs(v);
    ref[s.oc + c] += v * v;
    mag[s.oc + c] += v * v;
  }
  const double per_group = double(amx::Forward3x3::kGroup * s.h * s.w);
  for (std::size_t c = 0; c < 2 * s.oc; ++c) {
    INFO("statistic " << c);
    CHECK(std::fabs(r.stats[c] - ref[c]) <= per_group * std::ldexp(mag[c], -24) + 1e-30);
  }
}

}  // namespace

TEST_CASE("The AMX forward convolution gives the double sums, rounded to bf16", "[amx_conv]") {
  if (skip_without_amx_bf16()) return;
  const Shape shapes[] = {
      {3, 5, 7, 16, 16}, {13, 6, 4, 16, 32}, {9, 4, 6, 32, 32},   {2, 3, 3, 64, 32},    {10, 8, 8, 32, 64},
      {1, 1, 1, 32, 16}, {5, 2, 9, 96, 16},  {8, 32, 32, 16, 16}, {17, 16, 16, 32, 32}, {9, 8, 8, 64, 64},
  };
  unsigned seed = 11;
  for (const Shape& s : shapes) {
    check_shape(s, true, seed);
    check_shape(s, false, seed + 7);
    seed += 3;
  }
}

TEST_CASE("The AMX forward convolution at ResNet's stride-1 shapes, batch 128", "[amx_conv]") {
  if (skip_without_amx_bf16()) return;
  check_shape({128, 32, 32, 16, 16}, true, 101);
  check_shape({128, 16, 16, 32, 32}, true, 103);
  check_shape({128, 8, 8, 64, 64}, true, 105);
}

TEST_CASE("The AMX forward convolution's input map is the map applied to its input first", "[amx_conv]") {
  if (skip_without_amx_bf16()) return;
  for (const Shape& s : {Shape{11, 6, 5, 16, 32}, Shape{9, 4, 4, 64, 32}}) {
    for (const bool relu : {true, false}) {
      INFO(s.name() << (relu ? ", ReLU" : ", no ReLU"));
      const auto y = cifarnet::test::random_bf16(s.n * s.h * s.w * s.ic, false, 31);
      const auto w = random_weights(s, false, 32);
      const cifarnet::test::HostMap host(s.ic);
      const auto x = host.apply(y, relu);
      const amx::InputMap map{host.scale.data(), host.shift.data(), relu};
      const Run mapped = run_kernel(s, y, w, &map), plain = run_kernel(s, x, w);
      CHECK(mapped.y == plain.y);
      CHECK(mapped.stats == plain.stats);
    }
  }
}

TEST_CASE("The AMX forward convolution's bits do not depend on the thread count", "[amx_conv]") {
  if (skip_without_amx_bf16()) return;
  const Shape s{29, 8, 8, 32, 32};
  const auto x = cifarnet::test::random_bf16(s.n * s.h * s.w * s.ic, false, 41);
  const auto w = random_weights(s, false, 42);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const Run one = run_kernel(s, x, w);
  omp_set_num_threads(3);
  const Run three = run_kernel(s, x, w);
  omp_set_num_threads(before);
  const Run again = run_kernel(s, x, w);
  CHECK(one.y == three.y);
  CHECK(one.stats == three.stats);
  CHECK(one.y == again.y);
  CHECK(one.stats == again.stats);
}

TEST_CASE("The AMX forward convolution names the geometries it does not take", "[amx_conv]") {
  if (skip_without_amx_bf16()) return;
  CHECK(amx::Forward3x3::why_not(8, 8, 8, 8, 16) == "input channels neither 16 nor a multiple of 32");
  CHECK(amx::Forward3x3::why_not(8, 8, 8, 48, 16) == "input channels neither 16 nor a multiple of 32");
  CHECK(amx::Forward3x3::why_not(8, 8, 8, 32, 48) == "output channels neither 16 nor a multiple of 32");
  CHECK(amx::Forward3x3::why_not(0, 8, 8, 32, 32) == "an empty batch or image");
  CHECK(amx::Forward3x3::why_not(8, 8, 8, 32, 32).empty());
  CHECK_THROWS_WITH(amx::Forward3x3(8, 8, 8, 24, 32), Catch::Contains("input channels neither 16"));
  amx::Forward3x3 k(2, 4, 4, 32, 32);
  std::vector<std::uint16_t> x(2 * 4 * 4 * 32), y(x.size());
  CHECK_THROWS_WITH(k.run(x.data(), nullptr, y.data(), nullptr), Catch::Contains("before set_weights"));
  std::vector<float> w(9 * 32 * 32, 0.5f);
  k.set_weights(w.data());
  const amx::InputMap half{w.data(), nullptr, true};
  CHECK_THROWS_WITH(k.run(x.data(), &half, y.data(), nullptr), Catch::Contains("without scale or shift"));
}
