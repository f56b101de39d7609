// cifarnet/io/image.hpp — image files: decode JPEG/PNG/BMP, resize, save
// PNG/JPEG, with Debian's stb headers (stb_image, stb_image_resize,
// stb_image_write; see io/detail/stb_image.hpp and io/png.hpp for how they are
// compiled into a header-only library).
//
// Two containers: Image8 (8-bit, row-major HWC, what files hold) and
// Image (float32 HWC, what the networks and filters work on; values in
// [0, 255] when converted from Image8). Invariant of both: the pixel buffer
// holds height * width * channels values.
//
// Errors: a file that cannot be opened or written is an IoError naming it; a
// file that opens but does not decode (truncated, corrupt, unsupported format)
// is a DataError naming it and stb_image's reason. Bad arguments (zero sizes,
// unknown extensions, channel counts outside 1..4) are ConfigErrors.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/image.hpp"
#include "cifarnet/io/detail/stb_image.hpp"
#include "cifarnet/io/file.hpp"
#include "cifarnet/io/png.hpp"

namespace cifarnet::io {

/// An 8-bit image, row-major HWC (channels 1 = gray, 2 = gray + alpha,
/// 3 = RGB, 4 = RGBA).
struct Image8 {
  std::size_t height = 0, width = 0, channels = 0;
  std::vector<std::uint8_t> pixels;

  Image8() = default;
  Image8(std::size_t h, std::size_t w, std::size_t c, std::uint8_t fill = 0)
      : height(h), width(w), channels(c), pixels(h * w * c, fill) {}
  std::size_t size() const { return pixels.size(); }
  std::uint8_t& at(std::size_t y, std::size_t x, std::size_t c) {
    return pixels[(y * width + x) * channels + c];
  }
  std::uint8_t at(std::size_t y, std::size_t x, std::size_t c) const {
    return pixels[(y * width + x) * channels + c];
  }
};

/// Resampling filters of resize() and fit().
enum class ResizeFilter {
  Area,      ///< box filter: averages the covered source pixels (exact for integer ratios)
  Bilinear,  ///< triangle filter: bilinear interpolation when enlarging, widened to average when shrinking
};

/// How float values become bytes.
enum class ToByte {
  Round,     ///< clip to [0, 255], round to nearest
  Truncate,  ///< clip to [0, 255], drop the fraction (numpy's astype('uint8') after np.clip, the seed's save)
};

namespace detail {
inline void check_channels(int channels, const char* what) {
  if (channels < 0 || channels > 4)
    throw ConfigError(
        cifarnet::detail::concat(what, ": channels must be 0 (as stored) or 1 to 4, got ", channels));
}
struct StbFree {
  void operator()(unsigned char* p) const { stbi_image_free(p); }
};
/// Lower-case extension of a path ("png"), empty when it has none.
inline std::string extension_of(const std::string& path) {
  const auto dot = path.find_last_of('.');
  const auto slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string e = path.substr(dot + 1);
  for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

/// Rejects what Debian's stb_image (v2.27, 2022-09 snapshot) mishandles in
/// a JPEG: a DHT table whose 16 code counts add up to more than 256 makes
/// stbi__build_huffman write past its 257-byte size table (fixed upstream in
/// 2.28; found by tests/fuzz/fuzz_image.cpp). Walks the marker segments as
/// stb does (entropy-coded data after SOS up to the next real marker) and
/// reads each DHT's tables the way stb reads them; anything else is left to
/// stb. DataError naming the image and the byte offset of the bad table.
/// Rejects a PNG chunk whose length runs past the end of the data: stb_image
/// grows its IDAT buffer to the declared length before reading (up to 1 GiB
/// for a 103-byte file; found by tests/fuzz/fuzz_image.cpp). DataError naming
/// the image and the chunk's byte offset.
inline void check_png_chunks(const std::uint8_t* b, std::size_t n, const std::string& name) {
  static const std::uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (n < 8 || !std::equal(sig, sig + 8, b)) return;
  for (std::size_t p = 8; p + 8 <= n;) {
    const std::uint64_t len =
        std::uint64_t(b[p]) << 24 | std::uint64_t(b[p + 1]) << 16 | std::uint64_t(b[p + 2]) << 8 | b[p + 3];
    if (len + 12 > n - p)
      throw DataError(cifarnet::detail::at_file(
          name, p,
          cifarnet::detail::concat("PNG chunk '", std::string(reinterpret_cast<const char*>(b + p + 4), 4),
                                   "' declares ", len, " bytes but only ", n - p,
                                   " remain: truncated or corrupt file")));
    if (b[p + 4] == 'I' && b[p + 5] == 'E' && b[p + 6] == 'N' && b[p + 7] == 'D') return;
    p += 12 + std::size_t(len);
  }
}

/// Where a JPEG's data starts after its SOI marker, or 0 when the bytes are
/// not a JPEG to stb_image (which skips fill bytes: FF FF D8 is an SOI too).
inline std::size_t jpeg_after_soi(const std::uint8_t* b, std::size_t n) {
  if (n < 2 || b[0] != 0xFF) return 0;
  std::size_t p = 1;
  while (p < n && b[p] == 0xFF) ++p;
  return p < n && b[p] == 0xD8 ? p + 1 : 0;
}

inline void check_jpeg_tables(const std::uint8_t* b, std::size_t n, const std::string& name) {
  std::size_t p = jpeg_after_soi(b, n);
  if (p == 0) return;  // not a JPEG
  while (p + 1 < n) {
    if (b[p] != 0xFF) {  // stb skips junk between segments, byte by byte
      ++p;
      continue;
    }
    while (p + 1 < n && b[p + 1] == 0xFF) ++p;  // fill bytes
    if (p + 1 >= n) return;
    const std::uint8_t m = b[p + 1];
    p += 2;
    if (m == 0xD9) return;                                // EOI
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // no length
    if (p + 2 > n) return;
    const std::size_t len = std::size_t(b[p]) << 8 | b[p + 1];
    if (m == 0xC4) {
      long left = long(len) - 2;
      std::size_t q = p + 2;
      while (left > 0) {
        // Past the end of the data stb reads zeros and goes on.
        std::size_t codes = 0;
        for (std::size_t i = 1; i <= 16; ++i) codes += q + i < n ? b[q + i] : 0;
        if (codes > 256)
          throw DataError(cifarnet::detail::at_file(
              name, q,
              cifarnet::detail::concat("corrupt JPEG: a Huffman table (DHT) declares ", codes,
                                       " codes, at most 256 are possible")));
        left -= long(17 + codes);
        q += 17 + codes;
      }
    }
    p += len;
    // After SOS: entropy-coded data up to the next marker, i.e. FF (FF...)
    // followed by anything but 00 (a stuffed FF) or D0-D7 (restart), as
    // stb's bit reader sees it.
    while (m == 0xDA && p < n) {
      if (b[p] != 0xFF) {
        ++p;
        continue;
      }
      std::size_t r = p + 1;
      while (r < n && b[r] == 0xFF) ++r;
      if (r < n && b[r] != 0x00 && !(b[r] >= 0xD0 && b[r] <= 0xD7)) {
        p = r - 1;  // the marker's last FF
        break;
      }
      p = r + 1;
    }
  }
}
}  // namespace detail

/// Decodes JPEG, PNG or BMP bytes. `channels` = 0 keeps the stored channel
/// count, 1..4 converts (stb_image's conversion: RGB to gray uses weights
/// 77/150/29 over 256). `name` is used in messages. DataError on failure.
inline Image8 decode_image(const std::uint8_t* bytes, std::size_t n, const std::string& name,
                           int channels = 0) {
  detail::check_channels(channels, "decode_image");
  if (n == 0) throw DataError("image file '" + name + "' is empty");
  if (n > std::size_t(0x7fffffff))
    throw DataError(
        cifarnet::detail::concat("image file '", name, "' is ", n, " bytes; stb_image reads at most 2 GiB"));
  detail::check_jpeg_tables(bytes, n, name);
  detail::check_png_chunks(bytes, n, name);
  // stb_image pads a JPEG's or BMP's missing data with zeros, so a few
  // hundred bytes claiming 16000 x 16000 pixels "decode" for minutes into
  // gigabytes (found by tests/fuzz/fuzz_image.cpp). A complete JPEG spends at
  // least one bit per 8x8 block of its most-sampled component (<= 512 pixels
  // a byte); an uncompressed BMP at least one bit per pixel. PNG's data is
  // checked against the size by stb itself.
  {
    int iw = 0, ih = 0, ic = 0;
    const bool jpeg = detail::jpeg_after_soi(bytes, n) != 0;
    const bool bmp = n >= 2 && bytes[0] == 'B' && bytes[1] == 'M';
    // stbi_info reports a top-down BMP's height negative (stb_image loads |h| rows).
    if ((jpeg || bmp) && stbi_info_from_memory(bytes, static_cast<int>(n), &iw, &ih, &ic)) {
      const auto mag = [](int v) {
        return static_cast<std::uint64_t>(v < 0 ? -std::int64_t(v) : std::int64_t(v));
      };
      const std::uint64_t pixels = mag(iw) * mag(ih);
      const std::uint64_t most = (jpeg ? 512 : 8) * std::uint64_t(n) + 65536;
      if (pixels > most)
        throw DataError(cifarnet::detail::concat("image file '", name, "' (", n, " bytes) claims a ", iw, "x",
                                                 ih, " ", jpeg ? "JPEG" : "BMP", " image; ", n, " bytes of ",
                                                 jpeg ? "JPEG" : "BMP", " hold at most ", most,
                                                 " pixels: the file is truncated or corrupt"));
    }
  }
  int w = 0, h = 0, stored = 0;
  std::unique_ptr<unsigned char, detail::StbFree> p(
      stbi_load_from_memory(bytes, static_cast<int>(n), &w, &h, &stored, channels));
  if (!p) {
    const char* why = stbi_failure_reason();
    throw DataError(cifarnet::detail::concat("image file '", name, "' (", n,
                                             " bytes) cannot be decoded: ", why ? why : "unknown reason",
                                             " (stb_image; supported formats: JPEG, PNG, BMP)"));
  }
  // stb_image's BMP reader returns a 0-pixel-wide (or -high) image for such
  // a header instead of failing (found by tests/fuzz/fuzz_image.cpp).
  if (w <= 0 || h <= 0)
    throw DataError(cifarnet::detail::concat("image file '", name, "' (", n, " bytes) has an empty ", w, "x",
                                             h, " image (corrupt header)"));
  Image8 img;
  img.height = std::size_t(h);
  img.width = std::size_t(w);
  img.channels = std::size_t(channels ? channels : stored);
  img.pixels.assign(p.get(), p.get() + img.height * img.width * img.channels);
  return img;
}

/// Reads and decodes an image file (IoError if it cannot be read, DataError
/// if it does not decode).
inline Image8 load_image8(const std::string& path, int channels = 0) {
  detail::check_channels(channels, "load_image8");
  const std::vector<std::uint8_t> bytes = read_file(path);
  return decode_image(bytes.data(), bytes.size(), path, channels);
}

/// Converts bytes to float values in [0, 255].
inline Image to_float(const Image8& img) {
  Image out(img.height, img.width, img.channels);
  std::transform(img.pixels.begin(), img.pixels.end(), out.data.begin(),
                 [](std::uint8_t v) { return static_cast<float>(v); });
  return out;
}

/// Reads an image file as float32 HWC with values in [0, 255].
inline Image load_image(const std::string& path, int channels = 0) {
  return to_float(load_image8(path, channels));
}

/// Converts float values to bytes: clipped to [0, 255], rounded or
/// truncated; NaN becomes 0.
inline Image8 to_uint8(const Image& img, ToByte mode = ToByte::Round) {
  if (img.data.size() != img.height * img.width * img.channels)
    throw ShapeError(cifarnet::detail::concat("to_uint8: image of ", img.height, "x", img.width, "x",
                                              img.channels, " holds ", img.data.size(), " values"));
  Image8 out(img.height, img.width, img.channels);
  for (std::size_t i = 0; i < img.data.size(); ++i) {
    float v = img.data[i];
    if (!(v > 0.0f)) v = 0.0f;  // also NaN
    if (v > 255.0f) v = 255.0f;
    out.pixels[i] = static_cast<std::uint8_t>(mode == ToByte::Round ? std::lround(v) : long(v));
  }
  return out;
}

/// Resizes to height x width with stb_image_resize (linear color space,
/// edges clamped). ConfigError on zero sizes or more than 64 channels.
inline Image resize(const Image& img, std::size_t height, std::size_t width,
                    ResizeFilter filter = ResizeFilter::Area) {
  if (img.height == 0 || img.width == 0 || img.channels == 0 || height == 0 || width == 0)
    throw ConfigError(cifarnet::detail::concat("resize: cannot resize a ", img.height, "x", img.width, "x",
                                               img.channels, " image to ", height, "x", width));
  if (img.channels > 64 || img.height > (1u << 24) || img.width > (1u << 24) || height > (1u << 24) ||
      width > (1u << 24))
    throw ConfigError(cifarnet::detail::concat("resize: a ", img.height, "x", img.width, "x", img.channels,
                                               " image to ", height, "x", width,
                                               " is outside stb_image_resize's limits"));
  if (img.data.size() != img.height * img.width * img.channels)
    throw ShapeError("resize: the image buffer does not match its dimensions");
  Image out(height, width, img.channels);
  if (height == img.height && width == img.width) {
    out.data = img.data;
    return out;
  }
  const int c = int(img.channels);
  const int ok = stbir_resize_float_generic(
      img.data.data(), int(img.width), int(img.height), int(img.width * img.channels * sizeof(float)),
      out.data.data(), int(width), int(height), int(width * img.channels * sizeof(float)), c,
      STBIR_ALPHA_CHANNEL_NONE, 0, STBIR_EDGE_CLAMP,
      filter == ResizeFilter::Area ? STBIR_FILTER_BOX : STBIR_FILTER_TRIANGLE, STBIR_COLORSPACE_LINEAR,
      nullptr);
  if (!ok)
    throw Error(cifarnet::detail::concat("resize: stb_image_resize failed on a ", img.height, "x", img.width,
                                         "x", img.channels, " image to ", height, "x", width));
  return out;
}

/// Crops the centre of `img` to the aspect ratio of height x width, then
/// resizes to exactly that size (PIL's ImageOps.fit, which the style
/// transfer seed uses to load its images).
inline Image fit(const Image& img, std::size_t height, std::size_t width,
                 ResizeFilter filter = ResizeFilter::Area) {
  if (img.height == 0 || img.width == 0 || height == 0 || width == 0)
    throw ConfigError(cifarnet::detail::concat("fit: cannot fit a ", img.height, "x", img.width, " image to ",
                                               height, "x", width));
  // Largest centred window with the target aspect ratio.
  std::size_t ch = img.height, cw = img.width;
  if (img.width * height > img.height * width)
    cw = std::max<std::size_t>(1, (img.height * width + height / 2) / height);
  else
    ch = std::max<std::size_t>(1, (img.width * height + width / 2) / width);
  const std::size_t y0 = (img.height - ch) / 2, x0 = (img.width - cw) / 2, c = img.channels;
  Image crop(ch, cw, c);
  for (std::size_t y = 0; y < ch; ++y)
    std::copy_n(img.data.begin() + std::ptrdiff_t(((y0 + y) * img.width + x0) * c), cw * c,
                crop.data.begin() + std::ptrdiff_t(y * cw * c));
  return resize(crop, height, width, filter);
}

/// JPEG bytes (baseline, stb_image_write) at quality 1..100.
inline std::string encode_jpeg(const Image8& img, int quality = 95) {
  if (quality < 1 || quality > 100)
    throw ConfigError(cifarnet::detail::concat("encode_jpeg: quality must be in 1..100, got ", quality));
  if (img.height == 0 || img.width == 0 || img.channels < 1 || img.channels > 4 || img.height > 65535 ||
      img.width > 65535)
    throw ConfigError(cifarnet::detail::concat("encode_jpeg: cannot encode a ", img.height, "x", img.width,
                                               "x", img.channels, " image (JPEG: 1 to 65535 pixels a side)"));
  std::string out;
  if (!stbi_write_jpg_to_func(&detail::png_append, &out, int(img.width), int(img.height), int(img.channels),
                              img.pixels.data(), quality))
    throw Error(cifarnet::detail::concat("encode_jpeg: stb_image_write failed on a ", img.height, "x",
                                         img.width, "x", img.channels, " image"));
  return out;
}

/// Writes a PNG file (atomically: temporary file, then rename).
inline void save_png(const std::string& path, const Image8& img) {
  const std::string bytes = encode_png(img.pixels.data(), int(img.height), int(img.width), int(img.channels));
  write_file_atomic(path, bytes.data(), bytes.size(), /*durable=*/false);
}

/// Writes a JPEG file (atomically).
inline void save_jpeg(const std::string& path, const Image8& img, int quality = 95) {
  const std::string bytes = encode_jpeg(img, quality);
  write_file_atomic(path, bytes.data(), bytes.size(), /*durable=*/false);
}

/// Writes PNG or JPEG, chosen by the extension (.png, .jpg, .jpeg).
inline void save_image(const std::string& path, const Image8& img) {
  const std::string ext = detail::extension_of(path);
  if (ext == "png")
    save_png(path, img);
  else if (ext == "jpg" || ext == "jpeg")
    save_jpeg(path, img);
  else
    throw ConfigError("save_image: cannot tell the format of '" + path + "' (use .png, .jpg or .jpeg)");
}

}  // namespace cifarnet::io
