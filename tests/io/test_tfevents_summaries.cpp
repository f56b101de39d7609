// The CIFAR-10 tutorial's summaries in io/tfevents.hpp, decoded back from the
// event file: add_activation_summary ("<name>/activations" histogram and
// "<name>/sparsity", tf.nn.zero_fraction) and add_images (tf.summary.image
// on a float batch: tags, the max_outputs limit, TF's rescaling to bytes).
#include <catch2/catch.hpp>

#include <cifarnet/io/tfevents.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "io_test_util.hpp"
#include "png_decode.hpp"

using namespace cifarnet;
using namespace cifarnet::io;

TEST_CASE("Activation summaries: a histogram of the values and their fraction of zeros", "[io][tfevents]") {
  iotest::TempDir dir;
  // A ReLU's output: 6 of 10 values are zero.
  const std::vector<float> relu = {0, 0.5f, 0, 0, 2.0f, 0, 1.5f, 0, 0, 3.0f};
  std::string path;
  {
    EventWriter w(dir.path());
    path = w.path();
    w.add_activation_summary("conv1", relu.data(), relu.size(), 100);
  }
  const auto ev = read_events(path);
  REQUIRE(ev.size() == 2);
  CHECK(ev[1].step == 100);
  const auto& values = *ev[1].summary;
  REQUIRE(values.size() == 2);
  CHECK(values[0].tag == "conv1/activations");
  REQUIRE(values[0].is_histogram());
  const HistogramProto& h = values[0].histogram();
  CHECK(h.num == 10);
  CHECK(h.min == 0);
  CHECK(h.max == 3.0);
  CHECK(h.sum == Approx(7.0));
  CHECK(h.sum_squares == Approx(0.25 + 4 + 2.25 + 9));
  CHECK(values[1].tag == "conv1/sparsity");
  REQUIRE(values[1].is_scalar());
  CHECK(values[1].scalar() == Approx(0.6f));

  CHECK(EventWriter::zero_fraction(relu.data(), 0) == 0.0);
  const std::vector<float> bad = {0, std::numeric_limits<float>::quiet_NaN()};
  EventWriter w(dir.path() + "/bad");
  CHECK_THROWS_WITH(w.add_activation_summary("local3", bad.data(), bad.size(), 1),
                    Catch::Contains("NaN or Inf in summary histogram for: local3/activations"));
}

TEST_CASE("Image summaries rescale each float image as TensorFlow's image summary op", "[io][tfevents]") {
  // No negative value: scaled so the largest is 255, truncated.
  const float pos[4] = {0.0f, 1.0f, 2.0f, 4.0f};
  std::uint8_t out[4];
  EventWriter::image_to_bytes(pos, 4, 1, out);
  CHECK(std::vector<int>(out, out + 4) == std::vector<int>{0, 63, 127, 255});
  // A negative value: 127 / largest magnitude, offset 128.
  const float mixed[4] = {-2.0f, -1.0f, 0.0f, 1.0f};
  EventWriter::image_to_bytes(mixed, 4, 1, out);
  CHECK(std::vector<int>(out, out + 4) == std::vector<int>{1, 64, 128, 191});
  // All zero (below 1e-6): scale 0.
  const float zero[2] = {0.0f, 0.0f};
  EventWriter::image_to_bytes(zero, 2, 1, out);
  CHECK(std::vector<int>(out, out + 2) == std::vector<int>{0, 0});
  // A pixel with a NaN channel is TF's bad colour, red; the others scale on
  // the finite values.
  const float rgb[6] = {1.0f, 0.5f, 0.0f, std::nanf(""), 2.0f, 2.0f};
  std::uint8_t px[6];
  EventWriter::image_to_bytes(rgb, 2, 3, px);
  CHECK(std::vector<int>(px, px + 6) == std::vector<int>{127, 63, 0, 255, 0, 0});
}

TEST_CASE("Image summaries write the first max_outputs images of a batch as <tag>/image/<i>",
          "[io][tfevents]") {
  iotest::TempDir dir;
  // 4 images, 2x3 pixels, RGB, NHWC; image i holds values i + 1 ... so its
  // rescaled bytes are its own.
  const std::size_t n = 4, h = 2, w = 3, c = 3;
  std::vector<float> batch(n * h * w * c);
  for (std::size_t i = 0; i < batch.size(); ++i)
    batch[i] = float(i % (h * w * c)) * float(i / (h * w * c) + 1);
  std::string path;
  {
    EventWriter writer(dir.path());
    path = writer.path();
    writer.add_images("images", batch.data(), n, h, w, c, 5);  // TF's default: 3 of them
    writer.add_images("first", batch.data(), n, h, w, c, 6, 1);
  }
  const auto ev = read_events(path);
  REQUIRE(ev.size() == 3);
  const auto& three = *ev[1].summary;
  REQUIRE(three.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("image " << i);
    CHECK(three[i].tag == "images/image/" + std::to_string(i));
    REQUIRE(three[i].is_image());
    const ImageSummary& im = three[i].image();
    CHECK(im.height == 2);
    CHECK(im.width == 3);
    CHECK(im.colorspace == 3);
    std::vector<std::uint8_t> want(h * w * c);
    EventWriter::image_to_bytes(batch.data() + i * h * w * c, h * w, c, want.data());
    const auto decoded = iotest::decode_png(im.encoded);
    CHECK(decoded.pixels == want);
    // The largest value of each image becomes 255, whatever its scale.
    CHECK(decoded.pixels.back() == 255);
  }
  const auto& one = *ev[2].summary;
  REQUIRE(one.size() == 1);
  CHECK(one[0].tag == "first/image");

  EventWriter writer(dir.path() + "/bad");
  CHECK_THROWS_WITH(writer.add_images("images", batch.data(), n, h, w, 2, 1),
                    Catch::Contains("cannot show 2x3x2 images"));
  CHECK_THROWS_AS(writer.add_images("images", batch.data(), n, h, w, c, 1, 0), ConfigError);
}
