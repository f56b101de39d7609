// vision/filters.hpp: each of the seed's kernels (gray and RGB) applied with
// stride 3 SAME to a 6x6 image, against values computed by hand.
//
// The 6x6 gray image X is four 3x3 blocks, so each stride-3 output reads
// exactly one block (no padding):
//   top-left  [1 2 3; 4 5 6; 7 8 9]   top-right    impulse 9 at the centre
//   bottom-left impulse 1 at its top-left corner
//   bottom-right impulse 1 at its top-middle
// The RGB image holds (c + 1)·X in channel c.
#include <catch2/catch.hpp>

#include <cifarnet/vision/filters.hpp>

using namespace cifarnet;
using namespace cifarnet::vision;

namespace {
cifarnet::Image gray6() {
  cifarnet::Image x(6, 6, 1, 0.0f);
  for (std::size_t i = 0; i < 9; ++i) x.at(i / 3, i % 3, 0) = float(i + 1);
  x.at(1, 4, 0) = 9;
  x.at(3, 0, 0) = 1;
  x.at(3, 4, 0) = 1;
  return x;
}
cifarnet::Image rgb6() {
  const cifarnet::Image g = gray6();
  cifarnet::Image x(6, 6, 3);
  for (std::size_t y = 0; y < 6; ++y)
    for (std::size_t xx = 0; xx < 6; ++xx)
      for (std::size_t c = 0; c < 3; ++c) x.at(y, xx, c) = float(c + 1) * g.at(y, xx, 0);
  return x;
}
/// convolve on the seed's /256 input, scaled back, as (out00, out01, out10, out11) of channel c.
std::vector<float> run(const cifarnet::Image& img, const Kernel& k, std::size_t c = 0) {
  const cifarnet::Image y = convolve(to_unit_range(img), k, 3);
  REQUIRE(y.height == 2);
  REQUIRE(y.width == 2);
  REQUIRE(y.channels == k.out);
  std::vector<float> v;
  for (std::size_t i = 0; i < 4; ++i) v.push_back(y.at(i / 2, i % 2, c) * 256.0f);
  return v;
}
void check(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("output " << i);
    CHECK(got[i] == Approx(want[i]).margin(1e-5));
  }
}
}  // namespace

TEST_CASE("Gray kernels on a 6x6 image with stride 3 match hand computations", "[vision][filters]") {
  const cifarnet::Image x = gray6();
  check(run(x, kernels::blur(false)), {45, 9, 1, 1});
  check(run(x, kernels::sharpen(false)), {5, 45, 0, -1});
  check(run(x, kernels::edge(false)), {0, 36, 0, -1});
  check(run(x, kernels::top_sobel(false)), {-24, 0, 1, 2});
  check(run(x, kernels::emboss(false)), {29, 9, -2, -1});
}

TEST_CASE("RGB kernels mix channels as the seed writes them", "[vision][filters]") {
  const cifarnet::Image x = rgb6();  // channel sums are 6·X
  for (std::size_t c = 0; c < 3; ++c) {
    INFO("output channel " << c);
    check(run(x, kernels::blur(true), c), {30, 13.5f, 0.375f, 0.75f});
    check(run(x, kernels::sharpen(true), c), {30, 270, 0, -6});
    check(run(x, kernels::top_sobel(true), c), {-144, 0, 6, 12});
    check(run(x, kernels::emboss(true), c), {174, 54, -12, -6});
    // The RGB edge filter maps each channel to itself: (c + 1)·edge8(X).
    const float k = float(c + 1);
    check(run(x, kernels::edge(true), c), {0, 72 * k, -k, -k});
  }
}

TEST_CASE("The seed's list: blur, sharpen, edge, top Sobel, emboss, with top Sobel ReLU-clipped",
          "[vision][filters]") {
  for (bool rgb : {false, true}) {
    const auto ks = seed_kernels(rgb);
    REQUIRE(ks.size() == 5);
    CHECK(ks[0].name == "blur");
    CHECK(ks[1].name == "sharpen");
    CHECK(ks[2].name == "edge");
    CHECK(ks[3].name == "top_sobel");
    CHECK(ks[4].name == "emboss");
    for (std::size_t i = 0; i < 5; ++i) CHECK(ks[i].relu_clip == (i == 3));
    CHECK(ks[0].in == (rgb ? 3u : 1u));
  }
  // With the clip, -24 becomes 0; values above 255 are capped.
  check(run(gray6(), seed_kernels(false)[3]), {0, 0, 1, 2});
  cifarnet::Image big(3, 3, 1, 0.0f);
  big.at(0, 1, 0) = 1000.0f;
  CHECK(convolve(big, seed_kernels(false)[3], 3).data[0] == 255.0f);
}

TEST_CASE("SAME padding with stride 3 pads the bottom and right of a 5x5 image", "[vision][filters]") {
  const cifarnet::Image ones(5, 5, 1, 1.0f);
  const cifarnet::Image y = convolve(ones, kernels::blur(false), 3);
  REQUIRE(y.height == 2);
  REQUIRE(y.width == 2);
  CHECK(y.data == std::vector<float>{9, 6, 6, 4});
  CHECK(convolved_size(250, 333, 3) == std::array<std::size_t, 2>{84, 111});
}

TEST_CASE("Grayscale conversion uses TF's weights, and channel mismatches are errors", "[vision][filters]") {
  cifarnet::Image px(1, 1, 3);
  px.data = {100, 50, 200};
  CHECK(rgb_to_grayscale(px).data[0] == Approx(0.2989f * 100 + 0.5870f * 50 + 0.1140f * 200));
  CHECK_THROWS_AS(convolve(px, kernels::blur(false)), ShapeError);
  CHECK_THROWS_AS(rgb_to_grayscale(gray6()), ShapeError);
  CHECK_THROWS_AS(convolve(gray6(), kernels::blur(false), 0), ConfigError);
}
