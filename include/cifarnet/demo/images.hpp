// cifarnet/demo/images.hpp — demo content (cifarnet/demo/ holds what the
// examples, tests and benchmarks show, not library parts): built-in images
// for the style-transfer and image-filter examples (and their tests) when the
// user gives none. They keep the vision:: namespace of their users.
//
// Each is a pure function of its size: float32 HWC, 3 channels, values in
// [0, 255]. builtin_content_image draws a small landscape (sky, sun, hills,
// a house), builtin_style_image a colourful swirl pattern, and
// builtin_filter_image shapes with sharp edges on a gradient (what the
// edge, Sobel and emboss kernels show best).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/image.hpp"

namespace cifarnet::vision {

namespace detail {
inline void check_size(std::size_t h, std::size_t w, const char* what) {
  if (h < 8 || w < 8 || h > 8192 || w > 8192)
    throw ConfigError(
        cifarnet::detail::concat(what, ": size ", h, "x", w, " must lie within 8..8192 a side"));
}
inline void put(Image& img, std::size_t y, std::size_t x, float r, float g, float b) {
  float* p = img.data.data() + (y * img.width + x) * 3;
  p[0] = std::clamp(r, 0.0f, 255.0f);
  p[1] = std::clamp(g, 0.0f, 255.0f);
  p[2] = std::clamp(b, 0.0f, 255.0f);
}
/// HSV (h in [0, 1), s, v in [0, 1]) to RGB in [0, 255].
inline void hsv(float h, float s, float v, float& r, float& g, float& b) {
  h = h - std::floor(h);
  const float f = h * 6.0f;
  const int i = int(f) % 6;
  const float t = f - std::floor(f);
  const float p = v * (1 - s), q = v * (1 - s * t), u = v * (1 - s * (1 - t));
  const float rgb[6][3] = {{v, u, p}, {q, v, p}, {p, v, u}, {p, q, v}, {u, p, v}, {v, p, q}};
  r = 255.0f * rgb[i][0];
  g = 255.0f * rgb[i][1];
  b = 255.0f * rgb[i][2];
}
}  // namespace detail

/// A landscape: sky gradient, sun, two rows of hills, a house with a roof.
inline Image builtin_content_image(std::size_t height = 250, std::size_t width = 333) {
  detail::check_size(height, width, "builtin_content_image");
  Image img(height, width, 3);
  const float H = float(height), W = float(width);
  for (std::size_t y = 0; y < height; ++y)
    for (std::size_t x = 0; x < width; ++x) {
      const float u = float(x) / W, v = float(y) / H;
      float r = 90 + 120 * v, g = 150 + 80 * v, b = 235;  // sky
      const float du = u - 0.78f, dv = (v - 0.22f) * H / W;
      if (du * du + dv * dv < 0.0064f) r = 255, g = 214, b = 60;  // sun
      const float far = 0.55f + 0.08f * std::sin(9.0f * u + 1.0f);
      const float near = 0.72f + 0.06f * std::sin(5.0f * u + 2.5f);
      if (v > far) r = 70, g = 140 - 40 * (v - far), b = 80;    // far hills
      if (v > near) r = 60, g = 170 - 60 * (v - near), b = 50;  // near hills
      // A house: wall rectangle and triangular roof, on the near hills.
      const float hx0 = 0.18f, hx1 = 0.42f, wall_top = 0.58f, base = 0.86f, roof_top = 0.42f;
      if (u >= hx0 && u <= hx1 && v >= wall_top && v <= base) {
        r = 200, g = 60, b = 50;
        if (u > 0.27f && u < 0.33f && v > 0.72f) r = 90, g = 50, b = 30;                // door
        if (u > 0.2f && u < 0.25f && v > 0.63f && v < 0.7f) r = 240, g = 240, b = 170;  // window
      }
      const float mid = 0.5f * (hx0 + hx1), half = 0.5f * (hx1 - hx0) + 0.03f;
      if (v >= roof_top && v < wall_top &&
          std::fabs(u - mid) <= half * (v - roof_top) / (wall_top - roof_top))
        r = 110, g = 40, b = 40;
      detail::put(img, y, x, r, g, b);
    }
  return img;
}

/// Saturated swirls and stripes (stands in for a painting's style).
inline Image builtin_style_image(std::size_t height = 250, std::size_t width = 333) {
  detail::check_size(height, width, "builtin_style_image");
  Image img(height, width, 3);
  const float s = 40.0f / float(std::min(height, width));
  for (std::size_t y = 0; y < height; ++y)
    for (std::size_t x = 0; x < width; ++x) {
      const float fx = float(x) * s, fy = float(y) * s;
      const float cx = fx - 0.5f * float(width) * s, cy = fy - 0.5f * float(height) * s;
      const float radius = std::sqrt(cx * cx + cy * cy), angle = std::atan2(cy, cx);
      const float swirl = std::sin(radius * 0.9f - 3.0f * angle) + 0.6f * std::sin(0.7f * fx + 0.4f * fy);
      float r, g, b;
      detail::hsv(0.12f * swirl + 0.55f + 0.02f * fy, 0.85f,
                  0.55f + 0.4f * std::fabs(std::sin(1.3f * fx - fy)), r, g, b);
      detail::put(img, y, x, r, g, b);
    }
  return img;
}

/// Shapes with sharp edges on a horizontal gradient: a disc, a square, a
/// triangle, vertical stripes and a checkerboard.
inline Image builtin_filter_image(std::size_t height = 240, std::size_t width = 320) {
  detail::check_size(height, width, "builtin_filter_image");
  Image img(height, width, 3);
  const float H = float(height), W = float(width);
  for (std::size_t y = 0; y < height; ++y)
    for (std::size_t x = 0; x < width; ++x) {
      const float u = float(x) / W, v = float(y) / H;
      float r = 40 + 120 * u, g = 40 + 120 * u, b = 60 + 100 * u;
      const float du = u - 0.25f, dv = (v - 0.3f) * H / W;
      if (du * du + dv * dv < 0.018f) r = 230, g = 60, b = 40;                      // disc
      if (u > 0.55f && u < 0.85f && v > 0.1f && v < 0.5f) r = 50, g = 200, b = 80;  // square
      if (v > 0.6f && v < 0.92f && std::fabs(u - 0.25f) < 0.5f * (v - 0.6f))
        r = 60, g = 90, b = 230;                                                                // triangle
      if (u > 0.55f && u < 0.7f && v > 0.6f && v < 0.92f && (x / 6) % 2 == 0) r = g = b = 250;  // stripes
      if (u > 0.75f && u < 0.95f && v > 0.6f && v < 0.92f && ((x / 10) + (y / 10)) % 2 == 0) r = g = b = 15;
      detail::put(img, y, x, r, g, b);
    }
  return img;
}

}  // namespace cifarnet::vision
