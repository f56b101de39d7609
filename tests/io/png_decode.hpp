// PNG decoding for the io tests, with Debian's stb_image compiled static in
// each test file that includes this (test-only; the library only encodes).
#pragma once

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#endif
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace iotest {

struct Image {
  int height = 0, width = 0, channels = 0;
  std::vector<std::uint8_t> pixels;  // HWC
};

inline Image decode_png(const std::string& png) {
  Image im;
  unsigned char* p = stbi_load_from_memory(reinterpret_cast<const unsigned char*>(png.data()),
                                           int(png.size()), &im.width, &im.height, &im.channels, 0);
  if (!p) throw std::runtime_error(std::string("stb_image: ") + stbi_failure_reason());
  im.pixels.assign(p, p + std::size_t(im.width) * std::size_t(im.height) * std::size_t(im.channels));
  stbi_image_free(p);
  return im;
}

}  // namespace iotest
