// cifarnet/vision/filters.hpp — the style-transfer seed's hand-made 3x3
// kernels (TF_SEMANTICS.md §7) and their application with conv2d.
//
// A Kernel holds HWIO weights (3, 3, in, out), row-major, the layout of
// tf.nn.conv2d's filter and of cifarnet's Conv2d. Gray versions are 3x3x1x1;
// RGB versions are 3x3x3x3 with the channel mixing written in the seed: every
// input channel feeds every output channel (blur, sharpen, top Sobel,
// emboss), except the RGB edge filter, which maps each channel to itself.
// convolve() runs the reference backend's conv2d (NHWC, batch 1, TF SAME
// padding, any stride, no bias) on a float HWC image; the seed scales its
// image to [0, 1) by /256 first (to_unit_range) and uses stride 3.
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "cifarnet/backend/reference/conv2d.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/image.hpp"
#include "cifarnet/ops/geometry.hpp"

namespace cifarnet::vision {

/// A 3x3 convolution kernel, HWIO.
struct Kernel {
  std::string name;
  std::size_t in = 1, out = 1;
  std::vector<float> hwio;  ///< 9 * in * out values, index ((y * 3 + x) * in + ci) * out + co
  /// The seed clamps this kernel's result to [0, 255] (tf.minimum(tf.nn.relu(r), 255)).
  bool relu_clip = false;

  float at(std::size_t y, std::size_t x, std::size_t ci, std::size_t co) const {
    return hwio[((y * 3 + x) * in + ci) * out + co];
  }
};

/// How the 3x3 taps of an RGB kernel connect input to output channels.
enum class ChannelMix {
  All,       ///< every input channel into every output channel (a[y, x, :, :] = tap)
  Diagonal,  ///< channel c into channel c only
};

/// Builds a kernel from its 3x3 taps (row y, column x).
inline Kernel make_kernel(std::string name, const std::array<std::array<float, 3>, 3>& taps,
                          std::size_t channels = 1, ChannelMix mix = ChannelMix::All) {
  if (channels == 0) throw ConfigError("make_kernel: channels must be positive");
  Kernel k;
  k.name = std::move(name);
  k.in = k.out = channels;
  k.hwio.assign(9 * channels * channels, 0.0f);
  for (std::size_t y = 0; y < 3; ++y)
    for (std::size_t x = 0; x < 3; ++x)
      for (std::size_t ci = 0; ci < channels; ++ci)
        for (std::size_t co = 0; co < channels; ++co)
          if (mix == ChannelMix::All || ci == co)
            k.hwio[((y * 3 + x) * channels + ci) * channels + co] = taps[y][x];
  return k;
}

/// The seed's kernels (kernels.py), RGB (3x3x3x3) or gray (3x3x1x1).
namespace kernels {
inline Kernel blur(bool rgb) {
  return rgb ? make_kernel(
                   "blur",
                   {{{0.0625f, 0.125f, 0.0625f}, {0.125f, 0.25f, 0.125f}, {0.0625f, 0.125f, 0.0625f}}}, 3)
             : make_kernel("blur", {{{1, 1, 1}, {1, 1, 1}, {1, 1, 1}}});
}
inline Kernel sharpen(bool rgb) {
  return make_kernel("sharpen", {{{0, -1, 0}, {-1, 5, -1}, {0, -1, 0}}}, rgb ? 3 : 1);
}
inline Kernel edge(bool rgb) {
  return rgb ? make_kernel("edge", {{{-1, -1, -1}, {-1, 8, -1}, {-1, -1, -1}}}, 3, ChannelMix::Diagonal)
             : make_kernel("edge", {{{0, -1, 0}, {-1, 4, -1}, {0, -1, 0}}});
}
inline Kernel top_sobel(bool rgb) {
  return make_kernel("top_sobel", {{{1, 2, 1}, {0, 0, 0}, {-1, -2, -1}}}, rgb ? 3 : 1);
}
inline Kernel emboss(bool rgb) {
  return make_kernel("emboss", {{{-2, -1, 0}, {-1, 1, 1}, {0, 1, 2}}}, rgb ? 3 : 1);
}
}  // namespace kernels

/// The seed's list in its order: blur, sharpen, edge, top Sobel, emboss.
/// The seed ReLUs and clips at 255 the result with index 2 of the list it
/// convolves, meaning the edge filter; but it first drops blur
/// (kernels_list[1:]), so the clip lands on top Sobel. That is what it
/// computes, so top Sobel carries relu_clip here.
inline std::vector<Kernel> seed_kernels(bool rgb) {
  std::vector<Kernel> ks{kernels::blur(rgb), kernels::sharpen(rgb), kernels::edge(rgb),
                         kernels::top_sobel(rgb), kernels::emboss(rgb)};
  ks[3].relu_clip = true;
  return ks;
}

/// The seed's input scaling: x / 256 (values in [0, 1) for 8-bit images).
inline Image to_unit_range(Image img) {
  for (float& v : img.data) v /= 256.0f;
  return img;
}

/// tf.image.rgb_to_grayscale: 0.2989 R + 0.5870 G + 0.1140 B, one channel.
inline Image rgb_to_grayscale(const Image& img) {
  if (img.channels != 3)
    throw ShapeError(
        cifarnet::detail::concat("rgb_to_grayscale: needs 3 channels, the image has ", img.channels));
  Image out(img.height, img.width, 1);
  for (std::size_t i = 0; i < img.height * img.width; ++i) {
    const float* p = img.data.data() + 3 * i;
    out.data[i] = 0.2989f * p[0] + 0.5870f * p[1] + 0.1140f * p[2];
  }
  return out;
}

/// Output height and width of convolve(): ceil(size / stride) (TF SAME).
inline std::array<std::size_t, 2> convolved_size(std::size_t height, std::size_t width, std::size_t stride) {
  return {(height + stride - 1) / stride, (width + stride - 1) / stride};
}

/// tf.nn.conv2d(image, kernel, strides=[1, s, s, 1], padding='SAME') on one
/// HWC image (cifarnet's reference conv2d, NHWC), then the kernel's
/// relu_clip if set. ShapeError when the channel counts differ.
inline Image convolve(const Image& img, const Kernel& k, std::size_t stride = 3) {
  if (stride == 0) throw ConfigError("convolve: stride must be positive");
  if (img.channels != k.in)
    throw ShapeError(cifarnet::detail::concat("convolve: kernel '", k.name, "' takes ", k.in,
                                              " input channels but the image has ", img.channels));
  if (img.height == 0 || img.width == 0 || img.data.size() != img.height * img.width * img.channels)
    throw ShapeError(cifarnet::detail::concat("convolve: bad image of ", img.height, "x", img.width, "x",
                                              img.channels, " holding ", img.data.size(), " values"));
  if (k.hwio.size() != 9 * k.in * k.out)
    throw ShapeError(cifarnet::detail::concat("convolve: kernel '", k.name, "' holds ", k.hwio.size(),
                                              " weights, expected 3x3x", k.in, "x", k.out));
  const ConvGeom g = ConvGeom::make(DataFormat::NHWC, Shape{1, img.channels, img.height, img.width}, k.out, 3,
                                    stride, Padding::Same);
  Image out(g.oh, g.ow, k.out);
  Device<backend::Reference> dev;
  ops::Conv2d<backend::Reference, float>().forward(dev, g, img.data.data(), k.hwio.data(), nullptr,
                                                   out.data.data());
  if (k.relu_clip)
    for (float& v : out.data) v = std::min(std::max(v, 0.0f), 255.0f);
  return out;
}

}  // namespace cifarnet::vision
