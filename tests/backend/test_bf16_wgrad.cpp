// The AVX512-BF16 weight gradient of convolutions
// (backend/onednn/bf16_wgrad.hpp) against the same sums in double on the
// same bf16 values, at toy geometries (padding 0, 1, 2 and uneven, 1x1, 3x3,
// 5x5 and 1x7 kernels, non-square images, 8 to 64 channels, odd and even
// batches of 1 to 21 whose chunks and blocks come out uneven, strides 1, 2
// and 3 and mixed), at ResNet-20's five 3x3 geometries at batch 128 (three
// of stride 1, two of stride 2), at airbench94's 24 -> 64 at a smaller
// batch, and on sampled outputs at airbench94's 256 -> 256 at 3x3 and batch
// 500; and its bits, which must not depend on the number of OpenMP threads
// nor change from run to run. On a CPU or OS without AVX512-BF16 every case
// prints "SKIPPED: ..." and ctest reports it as skipped
// (tests/backend/CMakeLists.txt).
//
// The error bound and the harness: wgrad_check.hpp. Checked when the kernel
// was written (a probe with these toy cases and this bound): skipping the
// last chunk, reading x one column to the right, or leaving the second image
// of an odd batch's last pair stale from the block before fails the cases
// that meet them.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include <cifarnet/backend/onednn/bf16_wgrad.hpp>

#include "backend/amx_input_map.hpp"
#include "backend/wgrad_check.hpp"

namespace dot = cifarnet::backend::onednn::bf16dot;

namespace {

using namespace cifarnet::test::wgrad;
using K = dot::WeightGrad;

bool skip_without_bf16() {
  if (dot::available()) return false;
  WARN(
      "SKIPPED: no AVX512-BF16 here (CPUID has no AVX-512 F/BW/VL or AVX512-BF16, or the OS does not save "
      "the AVX-512 state)");
  return true;
}

}  // namespace

TEST_CASE("bf16dot weight gradient supports input channels in multiples of 8 and output channels of 16",
          "[bf16dot]") {
  CHECK(K::supported(128, 32, 32, 16, 16, 3, 3, 1, 1, 1, 1));
  CHECK(K::supported(2, 5, 7, 48, 32, 1, 1, 0, 0, 0, 0));
  CHECK(K::supported(500, 31, 31, 24, 64, 3, 3, 1, 1, 1, 1));  // airbench94's 24 -> 64
  CHECK(K::supported(2, 5, 5, 8, 16, 3, 3, 1, 1, 1, 1));
  CHECK(K::supported(2, 7, 5, 16, 16, 1, 1, 0, 0, 0, 0, 2, 3));
  CHECK_FALSE(K::supported(128, 32, 32, 3, 16, 3, 3, 1, 1, 1, 1));     // 3 input channels
  CHECK_FALSE(K::supported(2, 5, 5, 12, 16, 3, 3, 1, 1, 1, 1));        // 12: not a multiple of 8
  CHECK_FALSE(K::supported(128, 32, 32, 16, 24, 3, 3, 1, 1, 1, 1));    // 24 output channels
  CHECK_FALSE(K::supported(1, 2, 2, 16, 16, 5, 5, 1, 1, 1, 1));        // no output pixel
  CHECK_FALSE(K::supported(0, 4, 4, 16, 16, 3, 3, 1, 1, 1, 1));        // no image
  CHECK_FALSE(K::supported(2, 7, 5, 16, 16, 3, 3, 1, 1, 1, 1, 0, 2));  // stride 0
  CHECK_THROWS_WITH(K(1, 4, 4, 12, 16, 3, 3, 1, 1, 1, 1), Catch::Contains("ic must be a multiple of 8"));
}

// The toys the AMX kernel's tests use (wgrad_check.hpp), then odd batches
// (the last pair half zeros), a 1x1 kernel with two output vectors and
// padding beyond the kernel.
TEST_CASE("bf16dot weight gradient agrees with double sums at toy geometries", "[bf16dot]") {
  if (skip_without_bf16()) return;
  const Geom more[] = {{21, 6, 5, 16, 16, 3, 3, 1, 1, 1, 1},
                       {19, 4, 4, 24, 16, 3, 3, 1, 1, 1, 1},
                       {3, 3, 3, 16, 32, 1, 1, 0, 0, 0, 0},
                       {3, 5, 5, 16, 16, 3, 3, 4, 4, 4, 4}};
  unsigned seed = 11;
  check_all<K>(kToys, seed);
  check_all<K>(more, seed);
}

TEST_CASE("bf16dot weight gradient of strided convolutions agrees with double sums at toy geometries",
          "[bf16dot]") {
  if (skip_without_bf16()) return;
  const Geom odd[] = {{21, 6, 6, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2}};
  unsigned seed = 301;
  check_all<K>(kStridedToys, seed);
  check_all<K>(odd, seed);
}

TEST_CASE("bf16dot weight gradient agrees with double sums at the ResNet-20 geometries at batch 128",
          "[bf16dot]") {
  if (skip_without_bf16()) return;
  const Geom resnet[] = {{128, 32, 32, 16, 16, 3, 3, 1, 1, 1, 1},
                         {128, 32, 32, 16, 32, 3, 3, 1, 1, 1, 1, 2, 2},
                         {128, 16, 16, 32, 32, 3, 3, 1, 1, 1, 1},
                         {128, 16, 16, 32, 64, 3, 3, 1, 1, 1, 1, 2, 2},
                         {128, 8, 8, 64, 64, 3, 3, 1, 1, 1, 1}};
  unsigned seed = 101;
  for (const Geom& g : resnet) check_against_reference<K>(g, true, seed += 2);
  check_against_reference<K>(resnet[1], false, seed += 2);
}

TEST_CASE("bf16dot weight gradient agrees with double sums at airbench94's 24 -> 64", "[bf16dot]") {
  if (skip_without_bf16()) return;
  const Geom g{21, 31, 31, 24, 64, 3, 3, 1, 1, 1, 1};
  check_against_reference<K>(g, true, 501);
  check_against_reference<K>(g, false, 503);
}

TEST_CASE("bf16dot weight gradient gives the same bits for 1 2 and 3 threads and on every run", "[bf16dot]") {
  if (skip_without_bf16()) return;
  const Geom cases[] = {
      {128, 32, 32, 16, 16, 3, 3, 1, 1, 1, 1},       {128, 8, 8, 64, 64, 3, 3, 1, 1, 1, 1},
      {21, 6, 5, 16, 16, 3, 3, 1, 1, 1, 1},          {3, 7, 5, 48, 32, 3, 3, 1, 1, 1, 1},
      {128, 16, 16, 32, 64, 3, 3, 1, 1, 1, 1, 2, 2}, {20, 9, 7, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2},
      {19, 9, 9, 24, 64, 3, 3, 1, 1, 1, 1}};
  check_thread_bits<K>(cases, 201);
}

// airbench94's 256 -> 256 at 3x3, batch 500 (four chunks of up to 63
// pairs, blocks of 21), on sampled outputs: every output would take the double loop
// minutes under the sanitizers.
TEST_CASE("bf16dot weight gradient at airbench94's 256 -> 256 at 3x3 agrees with double sums on samples",
          "[bf16dot]") {
  const Geom g{500, 3, 3, 256, 256, 3, 3, 1, 1, 1, 1};
  K wg = g.make<K>();
  CHECK(wg.chunks() == 4);
  CHECK(wg.block_pairs() == 21);
  if (skip_without_bf16()) return;
  check_sampled(g, wg, 601);
}
