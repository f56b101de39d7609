// Tests of cifarnet/data/augment.hpp and transforms.hpp against values
// computed by hand from TensorFlow's definitions.
#include <catch2/catch.hpp>

#include <cifarnet/data/augment.hpp>
#include <cifarnet/data/transforms.hpp>

#include <cmath>
#include <set>
#include <utility>

using namespace cifarnet;
using namespace cifarnet::data;

namespace {
// h x w x c image with value(y, x, k) = 100 * y + 10 * x + k + 1
Image ramp(std::size_t h, std::size_t w, std::size_t c) {
  Image img(h, w, c);
  for (std::size_t y = 0; y < h; ++y)
    for (std::size_t x = 0; x < w; ++x)
      for (std::size_t k = 0; k < c; ++k) img.at(y, x, k) = float(100 * y + 10 * x + k + 1);
  return img;
}
Image from(std::size_t h, std::size_t w, std::size_t c, std::vector<float> v) {
  Image img(h, w, c);
  REQUIRE(v.size() == img.size());
  img.data = std::move(v);
  return img;
}
}  // namespace

TEST_CASE("resize_image_with_crop_or_pad pads an odd difference with the extra row and column after",
          "[data][augment]") {
  CHECK(crop_or_pad_offsets(2, 5).pad == 1);  // diff 3: 1 before, 2 after
  CHECK(crop_or_pad_offsets(32, 40).pad == 4);
  CHECK(crop_or_pad_offsets(5, 2).crop == 1);  // diff -3: 1 from the start, 2 from the end
  CHECK(crop_or_pad_offsets(32, 24).crop == 4);
  CHECK(crop_or_pad_offsets(4, 3).crop == 0);  // diff -1
  const Image in = ramp(2, 2, 1);
  Image out;
  resize_image_with_crop_or_pad(in, 5, 5, out);
  REQUIRE(out.geometry() == ImageGeometry{5, 5, 1});
  for (std::size_t y = 0; y < 5; ++y)
    for (std::size_t x = 0; x < 5; ++x) {
      const bool inside = y >= 1 && y <= 2 && x >= 1 && x <= 2;
      CHECK(out.at(y, x, 0) == (inside ? in.at(y - 1, x - 1, 0) : 0.0f));
    }
}

TEST_CASE("resize_image_with_crop_or_pad crops centred, rounding the offset down, each axis on its own",
          "[data][augment]") {
  const Image in = ramp(5, 5, 2);
  Image out;
  resize_image_with_crop_or_pad(in, 2, 2, out);
  CHECK(out.geometry() == ImageGeometry{2, 2, 2});
  CHECK(out.at(0, 0, 0) == in.at(1, 1, 0));
  CHECK(out.at(1, 1, 1) == in.at(2, 2, 1));
  // rows cropped 4 -> 3 (offset 0), columns padded 3 -> 6 (offset 1)
  const Image r = ramp(4, 3, 1);
  resize_image_with_crop_or_pad(r, 3, 6, out);
  REQUIRE(out.geometry() == ImageGeometry{3, 6, 1});
  const std::vector<float> row0 = {0, 1, 11, 21, 0, 0};
  const std::vector<float> row2 = {0, 201, 211, 221, 0, 0};
  for (std::size_t x = 0; x < 6; ++x) {
    CHECK(out.at(0, x, 0) == row0[x]);
    CHECK(out.at(2, x, 0) == row2[x]);
  }
  resize_image_with_crop_or_pad(r, 4, 3, out);  // same size: a copy
  CHECK(out.data == r.data);
  CHECK_THROWS_AS(resize_image_with_crop_or_pad(r, 0, 3, out), ConfigError);
}

TEST_CASE("crop_to_bounding_box and pad_to_bounding_box place the window exactly and check bounds",
          "[data][augment]") {
  const Image in = ramp(4, 4, 3);
  Image out;
  crop_to_bounding_box(in, 1, 2, 2, 2, out);
  CHECK(out.at(0, 0, 2) == in.at(1, 2, 2));
  CHECK(out.at(1, 1, 0) == in.at(2, 3, 0));
  CHECK_THROWS_AS(crop_to_bounding_box(in, 3, 0, 2, 2, out), ConfigError);
  Image padded;
  pad_to_bounding_box(in, 1, 0, 6, 5, padded);
  CHECK(padded.geometry() == ImageGeometry{6, 5, 3});
  CHECK(padded.at(0, 0, 0) == 0.0f);
  CHECK(padded.at(1, 0, 1) == in.at(0, 0, 1));
  CHECK(padded.at(4, 3, 2) == in.at(3, 3, 2));
  CHECK(padded.at(4, 4, 2) == 0.0f);
  CHECK(padded.at(5, 0, 0) == 0.0f);
  CHECK_THROWS_AS(pad_to_bounding_box(in, 3, 0, 6, 5, padded), ConfigError);
}

TEST_CASE("central_crop keeps size - 2 * int((size - size * fraction) / 2) per axis", "[data][augment]") {
  const Image in = ramp(32, 32, 3);
  Image out;
  central_crop(in, 0.75, out);  // start int(4.0) = 4 -> 24
  CHECK(out.geometry() == ImageGeometry{24, 24, 3});
  CHECK(out.at(0, 0, 0) == in.at(4, 4, 0));
  const Image five = ramp(5, 6, 1);
  central_crop(five, 0.5, out);  // rows: int(1.25) = 1 -> 3; columns: int(1.5) = 1 -> 4
  CHECK(out.geometry() == ImageGeometry{3, 4, 1});
  CHECK(out.at(0, 0, 0) == five.at(1, 1, 0));
  central_crop(five, 1.0, out);
  CHECK(out.data == five.data);
  CHECK_THROWS_AS(central_crop(five, 0.0, out), ConfigError);
  CHECK_THROWS_AS(central_crop(five, 1.5, out), ConfigError);
}

TEST_CASE("random_crop draws the row offset then the column offset, uniformly over every position",
          "[data][augment]") {
  const Image in = ramp(5, 4, 3);
  Image out, want;
  std::set<std::pair<std::size_t, std::size_t>> seen;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    Rng rng(seed), copy(seed);
    random_crop(in, 3, 3, rng, out);
    const std::size_t y = copy.uniform_int(3), x = copy.uniform_int(2);
    crop_to_bounding_box(in, y, x, 3, 3, want);
    REQUIRE(out.data == want.data);
    CHECK(rng.state() == copy.state());  // exactly two draws
    seen.insert({y, x});
  }
  CHECK(seen.size() == 6);  // all 3 x 2 offsets occur
  Rng rng(1);
  CHECK_THROWS_AS(random_crop(in, 6, 3, rng, out), ConfigError);
}

TEST_CASE("pad_and_random_crop equals crop_or_pad to 40x40 followed by random_crop to 32x32",
          "[data][augment]") {
  const Image in = ramp(32, 32, 3);
  Image fused, padded, two_step;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    Rng a(seed), b(seed);
    pad_and_random_crop(in, 4, a, fused);
    resize_image_with_crop_or_pad(in, 40, 40, padded);
    random_crop(padded, 32, 32, b, two_step);
    REQUIRE(fused.data == two_step.data);
    REQUIRE(a.state() == b.state());
  }
  // a pad wider than the image (only zeros can come in from the side)
  const Image small = ramp(2, 3, 1);
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    Rng a(seed), b(seed);
    pad_and_random_crop(small, 4, a, fused);
    resize_image_with_crop_or_pad(small, 10, 11, padded);
    random_crop(padded, 2, 3, b, two_step);
    REQUIRE(fused.data == two_step.data);
  }
}

TEST_CASE(
    "flip_left_right mirrors columns and keeps the channel order, and random flips happen half the time",
    "[data][augment]") {
  Image img = from(2, 3, 2, {1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60});
  flip_left_right(img);
  CHECK(img.data == std::vector<float>{3, 30, 2, 20, 1, 10, 6, 60, 5, 50, 4, 40});
  int flips = 0;
  for (std::uint64_t seed = 0; seed < 2000; ++seed) {
    Rng rng(seed), copy(seed);
    Image x = ramp(1, 2, 1);
    const bool flipped = random_flip_left_right(x, rng);
    CHECK(flipped == (copy.uniform() < 0.5));
    CHECK(x.at(0, 0, 0) == (flipped ? 11.0f : 1.0f));
    flips += flipped;
  }
  CHECK(flips > 900);
  CHECK(flips < 1100);
}

TEST_CASE("random_brightness adds one delta drawn uniformly from -max_delta to max_delta to every value",
          "[data][augment]") {
  Image img = from(1, 2, 1, {0.0f, 255.0f});
  adjust_brightness(img, -5.5f);
  CHECK(img.data == std::vector<float>{-5.5f, 249.5f});  // floats are not clipped
  float lo = 1e9f, hi = -1e9f;
  for (std::uint64_t seed = 0; seed < 1000; ++seed) {
    Rng rng(seed), copy(seed);
    Image x = from(1, 2, 1, {10.0f, 20.0f});
    const float d = random_brightness(x, 63.0f, rng);
    CHECK(d == static_cast<float>(copy.uniform(-63.0, 63.0)));
    CHECK(x.data == std::vector<float>{10.0f + d, 20.0f + d});
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  CHECK(lo >= -63.0f);
  CHECK(lo < -60.0f);
  CHECK(hi < 63.0f);
  CHECK(hi > 60.0f);
  Rng rng(0);
  CHECK_THROWS_AS(random_brightness(img, -1.0f, rng), ConfigError);
}

TEST_CASE("random_contrast scales every channel around its own mean", "[data][augment]") {
  // 1 x 2 pixels, 2 channels: channel 0 = {0, 4} (mean 2), channel 1 = {10, 30} (mean 20)
  Image img = from(1, 2, 2, {0, 10, 4, 30});
  adjust_contrast(img, 2.0f);
  CHECK(img.data == std::vector<float>{-2, 0, 6, 40});
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    Rng rng(seed), copy(seed);
    Image x = from(1, 2, 2, {0, 10, 4, 30});
    const float f = random_contrast(x, 0.2f, 1.8f, rng);
    CHECK(f == static_cast<float>(copy.uniform(0.2f, 1.8f)));
    CHECK(f >= 0.2f);
    CHECK(f < 1.8f);
    CHECK(x.data[0] == Approx((0 - 2) * f + 2));
    CHECK(x.data[3] == Approx((30 - 20) * f + 20));
  }
  Rng rng(0);
  CHECK_THROWS_AS(random_contrast(img, 1.0f, 1.0f, rng), ConfigError);
  CHECK_THROWS_AS(random_contrast(img, -0.5f, 1.0f, rng), ConfigError);
}

TEST_CASE("per_image_standardization divides by max(stddev, 1/sqrt(num_elements))", "[data][augment]") {
  // {1, 2, 3, 4}: mean 2.5, population variance 1.25, stddev 1.1180340 > 1/sqrt(4)
  Image a = from(2, 2, 1, {1, 2, 3, 4});
  per_image_standardization(a);
  const double sd = std::sqrt(1.25);
  for (int i = 0; i < 4; ++i) CHECK(a.data[i] == Approx((i + 1 - 2.5) / sd).epsilon(1e-6));
  // {0, 0, 0, 0.2}: mean 0.05, stddev 0.0866 < 0.5 = 1/sqrt(4), so the adjusted stddev is 0.5
  Image b = from(1, 1, 4, {0, 0, 0, 0.2f});
  per_image_standardization(b);
  CHECK(b.data[0] == Approx(-0.1).epsilon(1e-6));
  CHECK(b.data[3] == Approx(0.3).epsilon(1e-6));
  // a constant image becomes all zeros, never NaN
  Image c = from(2, 1, 2, {5, 5, 5, 5});
  per_image_standardization(c);
  CHECK(c.data == std::vector<float>{0, 0, 0, 0});
  // across channels, not per channel: 1 pixel with values {0, 10, 20} over 3 elements
  Image d = from(1, 1, 3, {0, 10, 20});
  per_image_standardization(d);
  const double sd3 = std::sqrt(200.0 / 3.0);
  CHECK(d.data[0] == Approx(-10 / sd3).epsilon(1e-6));
  CHECK(d.data[2] == Approx(10 / sd3).epsilon(1e-6));
}

TEST_CASE("the model-side scaling maps x to x / 128 - 1", "[data][augment]") {
  Image img = from(1, 3, 1, {0, 128, 255});
  scale_to_unit(img);
  CHECK(img.data == std::vector<float>{-1.0f, 0.0f, 0.9921875f});
}

TEST_CASE("transform types report their output geometry and apply the functions in order",
          "[data][transforms]") {
  const ImageGeometry g{32, 32, 3};
  CHECK(CropOrPad<40, 40>{}.output(g) == ImageGeometry{40, 40, 3});
  CHECK(CentralCrop<24, 24>{}.output(g) == ImageGeometry{24, 24, 3});
  CHECK(RandomCrop<24, 24>{}.output(g) == ImageGeometry{24, 24, 3});
  CHECK_THROWS_AS((RandomCrop<33, 24>{}.output(g)), ConfigError);
  CHECK(PadCrop<4>{}.output(g) == g);
  CHECK(RandomBrightness<63>::max_delta == 63.0f);
  CHECK(RandomBrightness<1, 4>::max_delta == 0.25f);
  CHECK(RandomContrast<>::lower == 0.2f);
  CHECK(RandomContrast<>::upper == 1.8f);
  // RandomCrop then RandomFlipLR with one generator == the free functions with the same draws
  const Image in = ramp(32, 32, 3);
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    Image img = in, scratch, want;
    Rng a(seed), b(seed);
    RandomCrop<24, 24>{}(img, scratch, a);
    RandomFlipLR{}(img, scratch, a);
    random_crop(in, 24, 24, b, want);
    random_flip_left_right(want, b);
    REQUIRE(img.data == want.data);
    REQUIRE(img.geometry() == ImageGeometry{24, 24, 3});
  }
  Image img = ramp(2, 2, 1), scratch;
  Rng rng(0);
  ScaleToUnit{}(img, scratch, rng);
  CHECK(img.at(0, 0, 0) == 1.0f / 128 - 1);
  Standardize{}(img, scratch, rng);
  double mean = 0;
  for (float v : img.data) mean += v;
  CHECK(mean == Approx(0).margin(1e-6));
}
