// io/image.hpp: decoding JPEG/PNG/BMP with stb_image, saving PNG/JPEG,
// resizing (area, bilinear), PIL-style fit, float <-> byte conversion, and
// the errors for unreadable, truncated and unsupported files.
#include <catch2/catch.hpp>

#include <cifarnet/core/rng.hpp>
#include <cifarnet/io/image.hpp>

#include <cmath>
#include <limits>

#include "io/io_test_util.hpp"

using namespace cifarnet;
using iotest::message_of;
using iotest::TempDir;

namespace {
io::Image8 random_image(std::size_t h, std::size_t w, std::size_t c, std::uint64_t seed) {
  Rng rng(seed);
  io::Image8 img(h, w, c);
  for (auto& p : img.pixels) p = std::uint8_t(rng.uniform_int(256));
  return img;
}
}  // namespace

TEST_CASE("PNG files round-trip with identical pixels for 1 to 4 channels", "[vision][image]") {
  TempDir dir;
  for (std::size_t c = 1; c <= 4; ++c) {
    const io::Image8 img = random_image(17, 23, c, 40 + c);
    const std::string path = dir / ("img" + std::to_string(c) + ".png");
    io::save_png(path, img);
    const io::Image8 back = io::load_image8(path);
    CHECK(back.height == 17);
    CHECK(back.width == 23);
    CHECK(back.channels == c);
    CHECK(back.pixels == img.pixels);
  }
}

TEST_CASE("BMP files decode to the pixels stb_image_write stored", "[vision][image]") {
  TempDir dir;
  const io::Image8 img = random_image(9, 13, 3, 7);
  std::string bytes;
  REQUIRE(stbi_write_bmp_to_func(&io::detail::png_append, &bytes, 13, 9, 3, img.pixels.data()));
  iotest::write_bytes(dir / "a.bmp", std::vector<std::uint8_t>(bytes.begin(), bytes.end()));
  const io::Image8 back = io::load_image8(dir / "a.bmp");
  CHECK(back.channels == 3);
  CHECK(back.pixels == img.pixels);
}

TEST_CASE("JPEG files save and load close to the original", "[vision][image]") {
  TempDir dir;
  // A smooth image (JPEG is lossy; noise would not compress faithfully).
  io::Image8 img(32, 48, 3);
  for (std::size_t y = 0; y < 32; ++y)
    for (std::size_t x = 0; x < 48; ++x)
      for (std::size_t c = 0; c < 3; ++c) img.at(y, x, c) = std::uint8_t(4 * y + 2 * x + 30 * c);
  io::save_image(dir / "a.jpg", img);
  const io::Image8 back = io::load_image8(dir / "a.jpg");
  REQUIRE(back.height == 32);
  REQUIRE(back.width == 48);
  REQUIRE(back.channels == 3);
  double err = 0;
  for (std::size_t i = 0; i < img.size(); ++i) err += std::abs(int(img.pixels[i]) - int(back.pixels[i]));
  CHECK(err / double(img.size()) < 3.0);
}

TEST_CASE("Channel conversion on load: gray, and RGBA with opaque alpha", "[vision][image]") {
  TempDir dir;
  io::Image8 img(4, 5, 3);
  for (std::size_t i = 0; i < img.size(); i += 3) img.pixels[i] = img.pixels[i + 1] = img.pixels[i + 2] = 77;
  io::save_png(dir / "g.png", img);
  const io::Image8 gray = io::load_image8(dir / "g.png", 1);
  REQUIRE(gray.channels == 1);
  for (auto v : gray.pixels) CHECK(int(v) == 77);  // equal R, G, B stay the same gray
  const io::Image8 rgba = io::load_image8(dir / "g.png", 4);
  REQUIRE(rgba.channels == 4);
  CHECK(int(rgba.at(3, 4, 3)) == 255);
  const cifarnet::Image f = io::load_image(dir / "g.png");
  CHECK(f.channels == 3);
  CHECK(f.at(2, 2, 1) == 77.0f);
  CHECK_THROWS_AS(io::load_image8(dir / "g.png", 5), ConfigError);
}

TEST_CASE("Unreadable, empty, truncated and unsupported image files are errors naming the file",
          "[vision][image]") {
  TempDir dir;
  const std::string missing = dir / "missing.png";
  CHECK_THAT(message_of<IoError>([&] { io::load_image8(missing); }), Catch::Contains("missing.png"));

  iotest::write_bytes(dir / "empty.png", {});
  CHECK_THAT(message_of<DataError>([&] { io::load_image8(dir / "empty.png"); }), Catch::Contains("is empty"));

  iotest::write_bytes(dir / "text.jpg", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
  const std::string m = message_of<DataError>([&] { io::load_image8(dir / "text.jpg"); });
  CHECK_THAT(m, Catch::Contains("text.jpg") && Catch::Contains("cannot be decoded") &&
                    Catch::Contains("unknown image type"));

  // A GIF header: a real format, but not one cifarnet decodes.
  iotest::write_bytes(dir / "a.gif", {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0});
  CHECK_THAT(message_of<DataError>([&] { io::load_image8(dir / "a.gif"); }), Catch::Contains("a.gif"));

  io::save_png(dir / "ok.png", random_image(20, 20, 3, 1));
  std::vector<std::uint8_t> bytes = iotest::read_bytes(dir / "ok.png");
  for (std::size_t keep : {8u, 40u, 100u}) {
    iotest::write_bytes(dir / "cut.png",
                        std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + long(keep)));
    INFO("truncated to " << keep << " bytes");
    CHECK_THAT(message_of<DataError>([&] { io::load_image8(dir / "cut.png"); }), Catch::Contains("cut.png"));
  }
}

TEST_CASE("Area resize averages blocks exactly at integer ratios, and bilinear keeps a ramp monotone",
          "[vision][image]") {
  cifarnet::Image img(4, 4, 1);
  for (std::size_t i = 0; i < 16; ++i) img.data[i] = float(i);
  const cifarnet::Image a = io::resize(img, 2, 2, io::ResizeFilter::Area);
  // Blocks {0,1,4,5}, {2,3,6,7}, {8,9,12,13}, {10,11,14,15}.
  CHECK(a.data[0] == Approx(2.5f));
  CHECK(a.data[1] == Approx(4.5f));
  CHECK(a.data[2] == Approx(10.5f));
  CHECK(a.data[3] == Approx(12.5f));

  cifarnet::Image ramp(1, 4, 1);
  for (std::size_t i = 0; i < 4; ++i) ramp.data[i] = float(10 * i);
  const cifarnet::Image up = io::resize(ramp, 1, 8, io::ResizeFilter::Bilinear);
  for (std::size_t i = 1; i < 8; ++i) CHECK(up.data[i] >= up.data[i - 1]);
  CHECK(up.data[0] >= 0.0f);
  CHECK(up.data[7] <= 30.0f);

  cifarnet::Image flat(10, 7, 3, 42.0f);
  for (auto f : {io::ResizeFilter::Area, io::ResizeFilter::Bilinear}) {
    const cifarnet::Image r = io::resize(flat, 5, 11, f);
    for (float v : r.data) CHECK(v == Approx(42.0f));
  }
  CHECK_THROWS_AS(io::resize(flat, 0, 3), ConfigError);
}

TEST_CASE("fit crops the centre to the target aspect ratio before resizing (PIL's ImageOps.fit)",
          "[vision][image]") {
  // 10 x 40: red outer quarters, blue centre 10 x 20. Fitting to 5 x 10 keeps the centre only.
  cifarnet::Image img(10, 40, 3, 0.0f);
  for (std::size_t y = 0; y < 10; ++y)
    for (std::size_t x = 0; x < 40; ++x) img.at(y, x, (x < 10 || x >= 30) ? 0 : 2) = 200.0f;
  const cifarnet::Image f = io::fit(img, 5, 10);
  REQUIRE(f.height == 5);
  REQUIRE(f.width == 10);
  for (std::size_t i = 0; i < f.data.size(); i += 3) {
    CHECK(f.data[i] == Approx(0.0f).margin(1e-4));
    CHECK(f.data[i + 2] == Approx(200.0f));
  }
}

TEST_CASE("Float to byte conversion clips, rounds or truncates, and maps NaN to 0", "[vision][image]") {
  cifarnet::Image img(1, 5, 1);
  img.data = {-3.0f, 12.6f, 254.5f, 300.0f, std::numeric_limits<float>::quiet_NaN()};
  const io::Image8 r = io::to_uint8(img);
  CHECK(std::vector<int>(r.pixels.begin(), r.pixels.end()) == std::vector<int>{0, 13, 255, 255, 0});
  const io::Image8 t = io::to_uint8(img, io::ToByte::Truncate);
  CHECK(std::vector<int>(t.pixels.begin(), t.pixels.end()) == std::vector<int>{0, 12, 254, 255, 0});
  TempDir dir;
  CHECK_THROWS_AS(io::save_image(dir / "x.tiff", r), ConfigError);
}
