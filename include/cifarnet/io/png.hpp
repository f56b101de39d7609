// cifarnet/io/png.hpp — PNG encoding of 8-bit images (TensorBoard image
// summaries, style-transfer outputs), with stb_image_write from Debian's
// libstb-dev.
//
// Header-only without duplicate symbols: stb_image_write's implementation is
// compiled here with STB_IMAGE_WRITE_STATIC, so every translation unit that
// includes this header gets its own internal-linkage copy and nothing is
// exported to the linker (no -lstb needed). If a translation unit already
// included <stb/stb_image_write.h> before this header, its declarations are
// used instead and the program must provide the implementation itself (its
// own STB_IMAGE_WRITE_IMPLEMENTATION translation unit, or -lstb); a unit that
// defines STB_IMAGE_WRITE_IMPLEMENTATION must not include this header.
// Output is deterministic (stb's default compression level 8, adaptive filters).
#pragma once

#include <cstdint>
#include <string>

#include "cifarnet/core/error.hpp"

#ifndef INCLUDE_STB_IMAGE_WRITE_H
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wcast-qual"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wpedantic"
#if !defined(__clang__)  // a GCC-only warning (clang: "unknown warning group")
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
#endif
#endif
#include <stb/stb_image_write.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#undef STB_IMAGE_WRITE_IMPLEMENTATION
#endif

namespace cifarnet::io {

namespace detail {
inline void png_append(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<std::size_t>(size));
}
}  // namespace detail

/// PNG bytes of an 8-bit image stored row-major HWC (channels 1 = gray,
/// 2 = gray + alpha, 3 = RGB, 4 = RGBA). ConfigError on bad dimensions.
inline std::string encode_png(const std::uint8_t* pixels, int height, int width, int channels) {
  if (height <= 0 || width <= 0 || channels < 1 || channels > 4 || height > (1 << 24) || width > (1 << 24))
    throw ConfigError(cifarnet::detail::concat("encode_png: cannot encode a ", height, "x", width, "x",
                                               channels, " image (need positive sizes and 1 to 4 channels)"));
  // stb sums a row's filter entropy in an int and sizes its buffer as
  // height * (row bytes + 1) in an int: keep both far from overflow.
  const std::uint64_t row = static_cast<std::uint64_t>(width) * static_cast<std::uint64_t>(channels);
  if (row >= (std::uint64_t(1) << 24) ||
      (row + 1) * static_cast<std::uint64_t>(height) >= (std::uint64_t(1) << 31))
    throw ConfigError(cifarnet::detail::concat("encode_png: a ", height, "x", width, "x", channels,
                                               " image is too large for PNG encoding"));
  std::string out;
  if (!stbi_write_png_to_func(&detail::png_append, &out, width, height, channels, pixels, width * channels))
    throw Error(cifarnet::detail::concat("encode_png: stb_image_write failed on a ", height, "x", width, "x",
                                         channels, " image"));
  return out;
}

}  // namespace cifarnet::io
