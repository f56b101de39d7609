// cifarnet/core/image.hpp — one float32 image in HWC order (TensorFlow's
// layout for tf.image.*) and its geometry: the type the augmentations
// (data/), the image files (io/image.hpp) and the filters and style transfer
// (vision/) exchange. Invariant: data.size() == height * width * channels.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cifarnet/core/error.hpp"

namespace cifarnet {

/// Height, width and channel count of one image.
struct ImageGeometry {
  std::size_t height = 0, width = 0, channels = 0;

  std::size_t size() const { return height * width * channels; }
  bool operator==(const ImageGeometry& o) const {
    return height == o.height && width == o.width && channels == o.channels;
  }
  bool operator!=(const ImageGeometry& o) const { return !(*this == o); }
  std::string str() const { return cifarnet::detail::concat(height, "x", width, "x", channels); }
};

/// One float32 image, HWC (row-major, channels innermost).
struct Image {
  std::size_t height = 0, width = 0, channels = 0;
  std::vector<float> data;

  Image() = default;
  Image(std::size_t h, std::size_t w, std::size_t c, float fill = 0.0f)
      : height(h), width(w), channels(c), data(h * w * c, fill) {}

  ImageGeometry geometry() const { return {height, width, channels}; }
  std::size_t size() const { return data.size(); }
  /// Reshapes to h x w x c, reusing the buffer (contents unspecified).
  void reshape(std::size_t h, std::size_t w, std::size_t c) {
    height = h;
    width = w;
    channels = c;
    data.resize(h * w * c);
  }
  float& at(std::size_t y, std::size_t x, std::size_t ch) { return data[(y * width + x) * channels + ch]; }
  float at(std::size_t y, std::size_t x, std::size_t ch) const {
    return data[(y * width + x) * channels + ch];
  }
};

}  // namespace cifarnet
