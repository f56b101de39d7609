// cifarnet/data/transforms.hpp — per-image transforms as types, the
// building blocks of Pipeline<Source, Transforms...>.
//
// A transform is a small struct whose compile-time parameters are its
// hyper-parameters (sizes, deltas as integers or std::ratio) with:
//   ImageGeometry output(const ImageGeometry& in) const;  // ConfigError if it cannot apply
//   void operator()(Image& img, Image& scratch, Rng& rng) const;
// operator() leaves its result in `img` (it may swap buffers with
// `scratch`) and draws from `rng` in the order augment.hpp documents.
// Transforms hold no state, so one instance serves every worker thread.
#pragma once

#include <cstddef>
#include <ratio>
#include <utility>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/data/augment.hpp"
#include "cifarnet/data/image.hpp"

namespace cifarnet {
namespace data {

namespace detail {
template <class R>
constexpr double ratio_value() {
  return static_cast<double>(R::num) / static_cast<double>(R::den);
}
}  // namespace detail

/// tf.image.resize_image_with_crop_or_pad to H x W (centred crop/zero pad).
template <std::size_t H, std::size_t W>
struct CropOrPad {
  static_assert(H > 0 && W > 0, "cifarnet: CropOrPad<H, W> needs a positive target size.");
  ImageGeometry output(const ImageGeometry& in) const { return {H, W, in.channels}; }
  void operator()(Image& img, Image& scratch, Rng&) const {
    resize_image_with_crop_or_pad(img, H, W, scratch);
    std::swap(img, scratch);
  }
};

/// The centre H x W of the image, as the classic tutorial's eval input does
/// it (resize_image_with_crop_or_pad, so TF's offset rounding).
template <std::size_t H, std::size_t W>
using CentralCrop = CropOrPad<H, W>;

/// tf.image.random_crop to H x W (two draws: row offset, column offset).
template <std::size_t H, std::size_t W>
struct RandomCrop {
  static_assert(H > 0 && W > 0, "cifarnet: RandomCrop<H, W> needs a positive crop size.");
  ImageGeometry output(const ImageGeometry& in) const {
    if (H > in.height || W > in.width)
      throw ConfigError(cifarnet::detail::concat("RandomCrop<", H, ", ", W,
                                                 ">: crop larger than the input image ", in.str()));
    return {H, W, in.channels};
  }
  void operator()(Image& img, Image& scratch, Rng& rng) const {
    random_crop(img, H, W, rng, scratch);
    std::swap(img, scratch);
  }
};

/// Zero-pad P pixels on every side, then a random crop back to the input
/// size: the ResNet seed's resize_image_with_crop_or_pad(40, 40) +
/// random_crop(32, 32) for 32x32 inputs and P = 4, fused (same draws).
template <std::size_t P>
struct PadCrop {
  ImageGeometry output(const ImageGeometry& in) const { return in; }
  void operator()(Image& img, Image& scratch, Rng& rng) const {
    pad_and_random_crop(img, P, rng, scratch);
    std::swap(img, scratch);
  }
};

/// tf.image.random_flip_left_right (one draw).
struct RandomFlipLR {
  ImageGeometry output(const ImageGeometry& in) const { return in; }
  void operator()(Image& img, Image&, Rng& rng) const { random_flip_left_right(img, rng); }
};

/// tf.image.random_brightness with max_delta = Num / Den (one draw).
template <long Num, long Den = 1>
struct RandomBrightness {
  static_assert(Den > 0 && Num >= 0, "cifarnet: RandomBrightness<Num, Den> needs max_delta = Num/Den >= 0.");
  static constexpr float max_delta = static_cast<float>(static_cast<double>(Num) / static_cast<double>(Den));
  ImageGeometry output(const ImageGeometry& in) const { return in; }
  void operator()(Image& img, Image&, Rng& rng) const { random_brightness(img, max_delta, rng); }
};

/// tf.image.random_contrast with factor ~ U[Lower, Upper) given as
/// std::ratio (the tutorial: std::ratio<1, 5>, std::ratio<9, 5>).
template <class Lower = std::ratio<1, 5>, class Upper = std::ratio<9, 5>>
struct RandomContrast {
  static_assert(std::ratio_greater_equal<Lower, std::ratio<0>>::value && std::ratio_less<Lower, Upper>::value,
                "cifarnet: RandomContrast<Lower, Upper> needs 0 <= Lower < Upper.");
  static constexpr float lower = static_cast<float>(detail::ratio_value<Lower>());
  static constexpr float upper = static_cast<float>(detail::ratio_value<Upper>());
  ImageGeometry output(const ImageGeometry& in) const { return in; }
  void operator()(Image& img, Image&, Rng& rng) const { random_contrast(img, lower, upper, rng); }
};

/// tf.image.per_image_standardization.
struct Standardize {
  ImageGeometry output(const ImageGeometry& in) const { return in; }
  void operator()(Image& img, Image&, Rng&) const { per_image_standardization(img); }
};

/// x / 128 - 1, the ResNet model's own scaling, for pipelines that want it
/// done on the input side instead.
struct ScaleToUnit {
  ImageGeometry output(const ImageGeometry& in) const { return in; }
  void operator()(Image& img, Image&, Rng&) const { scale_to_unit(img); }
};

}  // namespace data
}  // namespace cifarnet
