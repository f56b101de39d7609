// cifarnet/data/augment.hpp — image preprocessing and augmentation with
// TensorFlow's tf.image semantics, on one float32 HWC Image at a time.
//
// Deterministic: every random draw goes through the cifarnet::Rng passed
// in, in a fixed order (documented per function), so a seed fixes the
// result. TensorFlow's own random numbers (Philox) are not reproduced; the
// distributions and the arithmetic are. Float images are never clipped,
// exactly as tf.image does for float32 inputs. Functions taking `out` write
// a fresh image there and reuse its buffer (`out` must not alias `in`).
// Plain loops over contiguous buffers; no allocation once buffers are sized.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/data/image.hpp"

namespace cifarnet {
namespace data {

namespace detail {
/// Sum of p[i * stride] for i < n, minus `shift` per element, in double with
/// eight independent partial sums (a fixed order, so deterministic; the
/// independent chains let it run several times faster than one accumulator).
/// With `square`, sums (p - shift)^2 instead.
template <bool square>
inline double strided_sum(const float* p, std::size_t n, std::size_t stride, double shift) {
  double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (std::size_t j = 0; j < 8; ++j) {
      const double v = static_cast<double>(p[(i + j) * stride]) - shift;
      a[j] += square ? v * v : v;
    }
  for (; i < n; ++i) {
    const double v = static_cast<double>(p[i * stride]) - shift;
    a[0] += square ? v * v : v;
  }
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}
}  // namespace detail

/// tf.image.crop_to_bounding_box: the h x w window whose top-left corner is
/// (y, x). ConfigError if the window does not lie inside the image.
inline void crop_to_bounding_box(const Image& in, std::size_t y, std::size_t x, std::size_t h, std::size_t w,
                                 Image& out) {
  if (y + h > in.height || x + w > in.width)
    throw ConfigError(cifarnet::detail::concat("crop_to_bounding_box: window ", h, "x", w, " at (", y, ", ",
                                               x, ") exceeds image ", in.geometry().str()));
  const std::size_t c = in.channels;
  out.reshape(h, w, c);
  for (std::size_t r = 0; r < h; ++r)
    std::memcpy(out.data.data() + r * w * c, in.data.data() + ((y + r) * in.width + x) * c,
                w * c * sizeof(float));
}

/// tf.image.pad_to_bounding_box: places the image at (y, x) inside a zero
/// h x w canvas. ConfigError if it does not fit.
inline void pad_to_bounding_box(const Image& in, std::size_t y, std::size_t x, std::size_t h, std::size_t w,
                                Image& out) {
  if (y + in.height > h || x + in.width > w)
    throw ConfigError(cifarnet::detail::concat("pad_to_bounding_box: image ", in.geometry().str(), " at (", y,
                                               ", ", x, ") does not fit in ", h, "x", w));
  const std::size_t c = in.channels;
  out.reshape(h, w, c);
  std::fill(out.data.begin(), out.data.end(), 0.0f);
  for (std::size_t r = 0; r < in.height; ++r)
    std::memcpy(out.data.data() + ((y + r) * w + x) * c, in.data.data() + r * in.width * c,
                in.width * c * sizeof(float));
}

/// Offsets tf.image.resize_image_with_crop_or_pad uses along one axis of
/// length `size` resized to `target`: crop offset max(-diff // 2, 0) and pad
/// offset max(diff // 2, 0), diff = target - size (floor division, so an
/// odd difference puts the extra row/column after: pad 3 -> 1 before, 2
/// after; crop 3 -> 1 from the start, 2 from the end).
struct CropPadOffsets {
  std::size_t crop = 0, pad = 0;
};
inline CropPadOffsets crop_or_pad_offsets(std::size_t size, std::size_t target) {
  if (target >= size) return {0, (target - size) / 2};
  return {(size - target) / 2, 0};
}

/// tf.image.resize_image_with_crop_or_pad: centred crop and/or zero pad to
/// th x tw (each axis independently). One pass, no intermediate image.
inline void resize_image_with_crop_or_pad(const Image& in, std::size_t th, std::size_t tw, Image& out) {
  if (th == 0 || tw == 0)
    throw ConfigError(
        cifarnet::detail::concat("resize_image_with_crop_or_pad: target ", th, "x", tw, " must be positive"));
  const auto oy = crop_or_pad_offsets(in.height, th), ox = crop_or_pad_offsets(in.width, tw);
  const std::size_t c = in.channels;
  const std::size_t ch = std::min(in.height, th), cw = std::min(in.width, tw);  // copied window
  out.reshape(th, tw, c);
  if (ch != th || cw != tw) std::fill(out.data.begin(), out.data.end(), 0.0f);
  for (std::size_t r = 0; r < ch; ++r)
    std::memcpy(out.data.data() + ((oy.pad + r) * tw + ox.pad) * c,
                in.data.data() + ((oy.crop + r) * in.width + ox.crop) * c, cw * c * sizeof(float));
}

/// tf.image.central_crop(image, central_fraction): start = int((size -
/// size * fraction) / 2) per axis, size - 2 * start kept (TF 2.x formula).
/// ConfigError unless 0 < fraction <= 1.
inline void central_crop(const Image& in, double fraction, Image& out) {
  if (!(fraction > 0.0 && fraction <= 1.0))
    throw ConfigError(
        cifarnet::detail::concat("central_crop: central_fraction ", fraction, " not in (0, 1]"));
  const auto start = [&](std::size_t s) {
    const double d = static_cast<double>(s);
    return static_cast<std::size_t>((d - d * fraction) / 2);
  };
  const std::size_t y = start(in.height), x = start(in.width);
  crop_to_bounding_box(in, y, x, in.height - 2 * y, in.width - 2 * x, out);
}

/// tf.image.random_crop(image, [h, w, channels]): offsets drawn uniformly,
/// first the row offset in [0, H - h], then the column offset in [0, W - w].
/// ConfigError if the crop is larger than the image.
inline void random_crop(const Image& in, std::size_t h, std::size_t w, Rng& rng, Image& out) {
  if (h > in.height || w > in.width || h == 0 || w == 0)
    throw ConfigError(cifarnet::detail::concat("random_crop: size ", h, "x", w, " does not fit in image ",
                                               in.geometry().str()));
  const std::size_t y = static_cast<std::size_t>(rng.uniform_int(in.height - h + 1));
  const std::size_t x = static_cast<std::size_t>(rng.uniform_int(in.width - w + 1));
  crop_to_bounding_box(in, y, x, h, w, out);
}

/// Zero-pads by `pad` on every side and takes a random crop of the original
/// size: the same result, and the same two draws, as
/// resize_image_with_crop_or_pad(H + 2 pad, W + 2 pad) then random_crop(H, W),
/// done in one pass without the padded intermediate.
inline void pad_and_random_crop(const Image& in, std::size_t pad, Rng& rng, Image& out) {
  const std::size_t H = in.height, W = in.width, c = in.channels;
  const std::size_t dy = static_cast<std::size_t>(rng.uniform_int(2 * pad + 1));
  const std::size_t dx = static_cast<std::size_t>(rng.uniform_int(2 * pad + 1));
  out.reshape(H, W, c);
  // Output (r, col) = input (r + dy - pad, col + dx - pad), zero outside.
  const std::ptrdiff_t sy = static_cast<std::ptrdiff_t>(dy) - static_cast<std::ptrdiff_t>(pad);
  const std::ptrdiff_t sx = static_cast<std::ptrdiff_t>(dx) - static_cast<std::ptrdiff_t>(pad);
  const std::ptrdiff_t x0 = std::max<std::ptrdiff_t>(0, -sx);
  const std::ptrdiff_t x1 =
      std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(W), static_cast<std::ptrdiff_t>(W) - sx);
  for (std::size_t r = 0; r < H; ++r) {
    float* o = out.data.data() + r * W * c;
    const std::ptrdiff_t ir = static_cast<std::ptrdiff_t>(r) + sy;
    if (ir < 0 || ir >= static_cast<std::ptrdiff_t>(H) || x1 <= x0) {
      std::fill(o, o + W * c, 0.0f);
      continue;
    }
    std::fill(o, o + x0 * c, 0.0f);
    std::memcpy(o + x0 * c,
                in.data.data() + (static_cast<std::size_t>(ir) * W + static_cast<std::size_t>(x0 + sx)) * c,
                static_cast<std::size_t>(x1 - x0) * c * sizeof(float));
    std::fill(o + x1 * c, o + W * c, 0.0f);
  }
}

/// tf.image.flip_left_right, in place.
inline void flip_left_right(Image& img) {
  const std::size_t w = img.width, c = img.channels;
  for (std::size_t r = 0; r < img.height; ++r) {
    float* row = img.data.data() + r * w * c;
    for (std::size_t a = 0, b = w - 1; a < b; ++a, --b)
      for (std::size_t k = 0; k < c; ++k) std::swap(row[a * c + k], row[b * c + k]);
  }
}

/// tf.image.random_flip_left_right: one draw u ~ U[0, 1); flips when u < 0.5.
/// Returns whether it flipped.
inline bool random_flip_left_right(Image& img, Rng& rng) {
  const bool flip = rng.uniform() < 0.5;
  if (flip) flip_left_right(img);
  return flip;
}

/// tf.image.adjust_brightness for float images: x + delta (no clipping).
inline void adjust_brightness(Image& img, float delta) {
  for (float& v : img.data) v += delta;
}

/// tf.image.random_brightness: delta ~ U[-max_delta, max_delta) (one draw),
/// then adjust_brightness. Returns delta. ConfigError if max_delta < 0.
inline float random_brightness(Image& img, float max_delta, Rng& rng) {
  if (!(max_delta >= 0.0f))
    throw ConfigError(cifarnet::detail::concat("random_brightness: max_delta ", max_delta, " must be >= 0"));
  const float delta = static_cast<float>(rng.uniform(-max_delta, max_delta));
  adjust_brightness(img, delta);
  return delta;
}

/// tf.image.adjust_contrast for float images: per channel,
/// (x - mean) * factor + mean with mean over all pixels of that channel
/// (accumulated in double). No clipping.
inline void adjust_contrast(Image& img, float factor) {
  const std::size_t c = img.channels, n = img.height * img.width;
  if (n == 0) return;
  float* p = img.data.data();
  for (std::size_t k = 0; k < c; ++k) {
    const float mean =
        static_cast<float>(detail::strided_sum<false>(p + k, n, c, 0.0) / static_cast<double>(n));
    for (std::size_t i = 0; i < n; ++i) p[i * c + k] = (p[i * c + k] - mean) * factor + mean;
  }
}

/// tf.image.random_contrast: factor ~ U[lower, upper) (one draw), then
/// adjust_contrast. Returns the factor. ConfigError unless 0 <= lower < upper.
inline float random_contrast(Image& img, float lower, float upper, Rng& rng) {
  if (!(lower >= 0.0f) || !(upper > lower))
    throw ConfigError(cifarnet::detail::concat("random_contrast: need 0 <= lower < upper, got lower ", lower,
                                               ", upper ", upper));
  const float factor = static_cast<float>(rng.uniform(lower, upper));
  adjust_contrast(img, factor);
  return factor;
}

/// tf.image.per_image_standardization: (x - mean) / max(stddev,
/// 1/sqrt(H*W*C)), mean and (population) stddev over the whole image,
/// accumulated in double (two passes).
inline void per_image_standardization(Image& img) {
  const std::size_t n = img.data.size();
  if (n == 0) return;
  const float* p = img.data.data();
  const double mean = detail::strided_sum<false>(p, n, 1, 0.0) / static_cast<double>(n);
  // two passes: accurate for shifted images too
  const double var = detail::strided_sum<true>(p, n, 1, mean) / static_cast<double>(n);
  const double adjusted = std::max(std::sqrt(var), 1.0 / std::sqrt(static_cast<double>(n)));
  const float m = static_cast<float>(mean), inv = static_cast<float>(1.0 / adjusted);
  for (float& v : img.data) v = (v - m) * inv;
}

/// The ResNet model's own input scaling (TF_SEMANTICS.md §2): x / 128 - 1, maps
/// [0, 255] to [-1, 0.9921875]. On a raw buffer, so it serves batches too.
inline void scale_to_unit(float* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) p[i] = p[i] / 128.0f - 1.0f;
}
inline void scale_to_unit(Image& img) { scale_to_unit(img.data.data(), img.data.size()); }

}  // namespace data
}  // namespace cifarnet
