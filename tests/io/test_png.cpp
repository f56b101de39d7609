// PNG encoding (io/png.hpp) checked by decoding with stb_image. This file and
// test_tfevents.cpp both include io/png.hpp: the test executable linking
// proves the header-only stb_image_write setup defines no duplicate symbols.
#include <catch2/catch.hpp>

#include <cifarnet/io/png.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "io_test_util.hpp"
#include "png_decode.hpp"

using namespace cifarnet;
using namespace cifarnet::io;

TEST_CASE("encode_png writes PNGs that decode to the same pixels, 1 to 4 channels", "[io][png]") {
  for (int c = 1; c <= 4; ++c) {
    INFO("channels " << c);
    const int h = 7, w = 5;
    std::vector<std::uint8_t> px(std::size_t(h * w * c));
    for (std::size_t i = 0; i < px.size(); ++i) px[i] = std::uint8_t(i * 37 + 11);
    const std::string png = encode_png(px.data(), h, w, c);
    REQUIRE(png.size() > 8);
    CHECK(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
    const auto img = iotest::decode_png(png);
    CHECK(img.height == h);
    CHECK(img.width == w);
    CHECK(img.channels == c);
    CHECK(img.pixels == px);
    CHECK(encode_png(px.data(), h, w, c) == png);  // deterministic
  }
}

TEST_CASE("encode_png rejects impossible dimensions", "[io][png][errors]") {
  const std::uint8_t px[4] = {};
  CHECK(iotest::message_of<ConfigError>([&] { encode_png(px, 0, 2, 1); }) ==
        "cifarnet: encode_png: cannot encode a 0x2x1 image (need positive sizes and 1 to 4 channels)");
  CHECK(iotest::message_of<ConfigError>([&] { encode_png(px, 1, 1, 5); }) ==
        "cifarnet: encode_png: cannot encode a 1x1x5 image (need positive sizes and 1 to 4 channels)");
  CHECK(iotest::message_of<ConfigError>([&] { encode_png(px, 1 << 20, 1 << 20, 3); }) ==
        "cifarnet: encode_png: a 1048576x1048576x3 image is too large for PNG encoding");
}
