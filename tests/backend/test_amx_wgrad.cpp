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
// The error bound and the harness: wgrad_check.hpp. Checked when the
// kernel was written: shifting one offset by a pixel, or skipping a chunk,
// fails both kinds of case; for the strides, reading every phase from
// column 0 of x (dropping the phase's first column) fails the strided cases.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include <cifarnet/backend/onednn/amx_wgrad.hpp>

#include "backend/amx_input_map.hpp"
#include "backend/wgrad_check.hpp"

namespace amx = cifarnet::backend::onednn::amx;

namespace {

using namespace cifarnet::test::wgrad;
using K = amx::WeightGrad;

bool skip_without_amx() {
  if (amx::amx_available()) return false;
  WARN("SKIPPED: no AMX here (CPUID has no AMX-TILE/AMX-BF16/AVX-512BW, or Linux refused the tile data)");
  return true;
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
  unsigned seed = 11;
  check_all<K>(kToys, seed);
}

TEST_CASE("amx weight gradient agrees with double sums at the ResNet-20 geometries at batch 128", "[amx]") {
  if (skip_without_amx()) return;
  unsigned seed = 101;
  for (const Geom& g : kResnet) check_against_reference<K>(g, true, seed += 2);
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
  CHECK(kResnetStrided[0].supported<K>());
  CHECK(kResnetStrided[1].supported<K>());
  CHECK(amx::WeightGrad::supported(2, 7, 5, 16, 16, 1, 1, 0, 0, 0, 0, 2, 3));
  CHECK_FALSE(amx::WeightGrad::supported(2, 7, 5, 16, 16, 3, 3, 1, 1, 1, 1, 0, 2));  // stride 0
  CHECK_FALSE(amx::WeightGrad::supported(2, 7, 5, 16, 24, 3, 3, 1, 1, 1, 1, 2, 2));  // 24 output channels
}

TEST_CASE("amx weight gradient of strided convolutions agrees with double sums at toy geometries", "[amx]") {
  if (skip_without_amx()) return;
  unsigned seed = 301;
  check_all<K>(kStridedToys, seed);
}

TEST_CASE(
    "amx weight gradient of strided convolutions agrees with double sums at the ResNet-20 stride-2 "
    "geometries at batch 128",
    "[amx]") {
  if (skip_without_amx()) return;
  unsigned seed = 401;
  for (const Geom& g : kResnetStrided) {
    check_against_reference<K>(g, true, seed += 2);
    check_against_reference<K>(g, false, seed += 2);
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
  check_thread_bits<K>(cases, 201);
}

TEST_CASE("amx weight gradient agrees with double sums at airbench94's 24 -> 64 (input channels padded)",
          "[amx]") {
  if (skip_without_amx()) return;
  const Geom g{20, 31, 31, 24, 64, 3, 3, 1, 1, 1, 1};
  check_against_reference<K>(g, true, 501);
  check_against_reference<K>(g, false, 503);
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
  K wg = g.make<K>();
  CHECK(wg.block_images() == 63);  // a whole chunk (500 / 8 images) within 1 MiB
  if (skip_without_amx()) return;
  check_sampled(g, wg, 601);
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
      K mapped = g.make<K>(), plain = g.make<K>();
      std::vector<float> dw_mapped(g.kh * g.kw * g.ic * g.oc, -7.0f), dw_plain(dw_mapped.size(), 7.0f);
      mapped.run(y.data(), &map, dy.data(), dw_mapped.data());
      plain.run(x.data(), dy.data(), dw_plain.data());
      CHECK(std::memcmp(dw_mapped.data(), dw_plain.data(), dw_plain.size() * sizeof(float)) == 0);
    }
  K wg = cases[0].make<K>();
  std::vector<std::uint16_t> x(cases[0].x_size()), dy(cases[0].dy_size());
  std::vector<float> dw(9 * 16 * 16), scale(16, 1.0f);
  const amx::InputMap half{scale.data(), nullptr, true};
  CHECK_THROWS_WITH(wg.run(x.data(), &half, dy.data(), dw.data()), Catch::Contains("without scale or shift"));
}
