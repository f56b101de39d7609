// cifarnet/data/image.hpp — the data set container of the data area.
//
// ImageSet: a whole data set in memory as uint8, one image after the other,
// each image in CHW order exactly as the CIFAR binary files and the seed's
// TFRecord `image` feature store it (1,024 red, then green, then blue bytes,
// each plane row-major), plus int32 labels. Invariant: pixels.size() ==
// labels.size() * geometry.size().
//
// Images are converted from uint8 CHW to float HWC (cifarnet::Image,
// core/image.hpp) once, by decode_chw_to_hwc().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/image.hpp"

namespace cifarnet {
namespace data {

/// A labelled image set held in memory as uint8 CHW images.
struct ImageSet {
  ImageGeometry geometry{32, 32, 3};
  std::vector<std::uint8_t> pixels;         ///< size() * geometry.size() bytes, CHW per image
  std::vector<std::int32_t> labels;         ///< one label per image (CIFAR-100: the fine label)
  std::vector<std::int32_t> coarse_labels;  ///< CIFAR-100 only: the coarse (super-class) label
  std::size_t num_classes = 0;              ///< labels lie in [0, num_classes)
  std::vector<std::string> class_names;     ///< from batches.meta.txt when present
  std::vector<std::string> coarse_class_names;

  std::size_t size() const { return labels.size(); }
  /// The CHW bytes of image i.
  const std::uint8_t* image(std::size_t i) const { return pixels.data() + i * geometry.size(); }
  std::uint8_t* image(std::size_t i) { return pixels.data() + i * geometry.size(); }

  /// Appends another set with the same geometry (used to join batch files).
  void append(const ImageSet& o) {
    if (o.geometry != geometry)
      throw DataError(cifarnet::detail::concat("cannot join image sets of geometry ", geometry.str(), " and ",
                                               o.geometry.str()));
    pixels.insert(pixels.end(), o.pixels.begin(), o.pixels.end());
    labels.insert(labels.end(), o.labels.begin(), o.labels.end());
    coarse_labels.insert(coarse_labels.end(), o.coarse_labels.begin(), o.coarse_labels.end());
  }
};

/// Converts one uint8 CHW image to float HWC (values 0..255): the single
/// uint8 -> float conversion of an image on its way into a batch.
inline void decode_chw_to_hwc(const std::uint8_t* chw, const ImageGeometry& g, float* hwc) {
  const std::size_t plane = g.height * g.width, c = g.channels;
  if (c == 3) {  // the common case, unrolled
    const std::uint8_t *r = chw, *gr = chw + plane, *b = chw + 2 * plane;
    for (std::size_t p = 0; p < plane; ++p) {
      hwc[3 * p] = static_cast<float>(r[p]);
      hwc[3 * p + 1] = static_cast<float>(gr[p]);
      hwc[3 * p + 2] = static_cast<float>(b[p]);
    }
    return;
  }
  for (std::size_t ch = 0; ch < c; ++ch)
    for (std::size_t p = 0; p < plane; ++p) hwc[p * c + ch] = static_cast<float>(chw[ch * plane + p]);
}

/// Same, into an Image (reshaped to the geometry).
inline void decode_chw_to_hwc(const std::uint8_t* chw, const ImageGeometry& g, Image& out) {
  out.reshape(g.height, g.width, g.channels);
  decode_chw_to_hwc(chw, g, out.data.data());
}

}  // namespace data
}  // namespace cifarnet
