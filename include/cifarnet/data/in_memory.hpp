// cifarnet/data/in_memory.hpp — epoch-by-epoch batches over a data set held
// in memory, with augmentation stages that may depend on the example's index
// and the epoch (the airbench CIFAR-10 recipe's loader):
//
//   data::InMemoryDataset set(images, labels);          // HWC float images
//   data::EpochLoader<data::AlternatingFlip, data::RandomTranslate<2>> train(set, opts);
//   for (std::uint64_t e = 0; e < epochs; ++e) {
//     train.start_epoch(e);
//     Batch b; while (train.next(b)) { ... }
//   }
//
// Semantics: each epoch visits the examples once, in a fresh uniform
// permutation (shuffle) or in order; consecutive examples form batches of
// batch_size, the last partial batch dropped when drop_last. Each example is
// copied from the set, passed through the stages in order (HWC), and
// written into the batch in the requested DataFormat. Stages are stateless
// types with
//   ImageGeometry output(const ImageGeometry& in) const;
//   void operator()(Image& img, Image& scratch, const ExampleContext& ctx, Rng& rng) const;
// where ctx holds the example's index in the set and the epoch.
//
// Determinism: the permutation of epoch e is drawn on Rng::stream(seed', e);
// the example at position k of epoch e is augmented with its own generator
// Rng::stream(seed'', e·N + k); AlternatingFlip's per-image decision is a
// hash of (seed, index). So start_epoch(e) may be called in any order and a
// seed fixes every batch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/data/augment.hpp"
#include "cifarnet/data/image.hpp"
#include "cifarnet/data/pipeline.hpp"

namespace cifarnet {
namespace data {

/// Images (all of one geometry, HWC float) and their labels, in memory.
class InMemoryDataset {
 public:
  InMemoryDataset() = default;
  /// ConfigError unless every image has the first one's geometry and there
  /// is one label per image.
  InMemoryDataset(std::vector<Image> images, std::vector<std::int32_t> labels)
      : images_(std::move(images)), labels_(std::move(labels)) {
    if (images_.size() != labels_.size())
      throw ConfigError(cifarnet::detail::concat("InMemoryDataset: ", images_.size(), " images but ",
                                                 labels_.size(), " labels"));
    for (std::size_t i = 0; i < images_.size(); ++i)
      if (images_[i].geometry() != images_[0].geometry() || images_[i].size() == 0)
        throw ConfigError(cifarnet::detail::concat("InMemoryDataset: image ", i, " is ",
                                                   images_[i].geometry().str(), ", image 0 is ",
                                                   images_[0].geometry().str()));
  }
  std::size_t size() const { return images_.size(); }
  ImageGeometry geometry() const { return images_.empty() ? ImageGeometry{} : images_[0].geometry(); }
  const Image& image(std::size_t i) const { return images_.at(i); }
  std::int32_t label(std::size_t i) const { return labels_.at(i); }

 private:
  std::vector<Image> images_;
  std::vector<std::int32_t> labels_;
};

/// Which example a stage is transforming, and in which epoch.
struct ExampleContext {
  std::size_t index = 0;    ///< the example's index in the data set
  std::uint64_t epoch = 0;  ///< the epoch being served
};

/// Mirror image of pixel coordinate k in [0, n) under PyTorch's "reflect"
/// padding (the edge pixel is not repeated): −1 → 1, n → n − 2. Valid for
/// −(n − 1) <= k <= 2n − 2.
inline std::size_t reflect_index(std::ptrdiff_t k, std::size_t n) {
  const auto m = static_cast<std::ptrdiff_t>(n);
  if (k < 0) k = -k;
  if (k >= m) k = 2 * (m - 1) - k;
  return static_cast<std::size_t>(k);
}

/// out(y, x) = in(reflect(y + dy), reflect(x + dx)): the image shifted by
/// (−dy, −dx) with reflect padding; |dy| < H and |dx| < W. `out` must not
/// alias `in`.
inline void translate_reflect(const Image& in, std::ptrdiff_t dy, std::ptrdiff_t dx, Image& out) {
  const std::size_t h = in.height, w = in.width, c = in.channels;
  if (static_cast<std::size_t>(dy < 0 ? -dy : dy) >= h || static_cast<std::size_t>(dx < 0 ? -dx : dx) >= w)
    throw ConfigError(cifarnet::detail::concat("translate_reflect: shift (", dy, ", ", dx,
                                               ") needs a larger image than ", in.geometry().str()));
  out.reshape(h, w, c);
  for (std::size_t y = 0; y < h; ++y) {
    const std::size_t sy = reflect_index(static_cast<std::ptrdiff_t>(y) + dy, h);
    for (std::size_t x = 0; x < w; ++x) {
      const std::size_t sx = reflect_index(static_cast<std::ptrdiff_t>(x) + dx, w);
      std::memcpy(out.data.data() + (y * w + x) * c, in.data.data() + (sy * w + sx) * c, c * sizeof(float));
    }
  }
}

/// Alternating flip: each image gets one fair coin, drawn once for the
/// whole run (a hash of the seed and its index), and is mirrored left-right
/// in the epochs where coin XOR (epoch is odd) is true — so every image is
/// seen flipped in exactly one of any two consecutive epochs, half of the
/// images starting flipped. Draws nothing from the example's Rng.
struct AlternatingFlip {
  std::uint64_t seed = 0;
  /// Whether image `index` is flipped in `epoch`.
  bool flipped(std::size_t index, std::uint64_t epoch) const {
    const bool coin = (detail::mix64(detail::mix64(seed, 0xF1u), index) >> 63) != 0;
    return coin != (epoch % 2 == 1);
  }
  ImageGeometry output(const ImageGeometry& in) const { return in; }
  void operator()(Image& img, Image&, const ExampleContext& ctx, Rng&) const {
    if (flipped(ctx.index, ctx.epoch)) flip_left_right(img);
  }
};

/// Random translation by up to R pixels with reflect padding: two draws
/// from the example's Rng, the row shift dy then the column shift dx, each
/// uniform in [−R, R]; out(y, x) = in(reflect(y + dy), reflect(x + dx))
/// (a crop of the image reflect-padded by R at offset (R + dy, R + dx)).
template <std::size_t R>
struct RandomTranslate {
  ImageGeometry output(const ImageGeometry& in) const {
    if (R >= in.height || R >= in.width)
      throw ConfigError(cifarnet::detail::concat(
          "RandomTranslate<", R, ">: reflect padding needs images larger than ", R, ", got ", in.str()));
    return in;
  }
  void operator()(Image& img, Image& scratch, const ExampleContext&, Rng& rng) const {
    const auto dy = static_cast<std::ptrdiff_t>(rng.uniform_int(2 * R + 1)) - static_cast<std::ptrdiff_t>(R);
    const auto dx = static_cast<std::ptrdiff_t>(rng.uniform_int(2 * R + 1)) - static_cast<std::ptrdiff_t>(R);
    translate_reflect(img, dy, dx, scratch);
    std::swap(img, scratch);
  }
};

/// Options of an EpochLoader.
struct EpochLoaderOptions {
  std::size_t batch_size = 500;
  bool shuffle = true;    ///< a fresh permutation each epoch (else set order)
  bool drop_last = true;  ///< drop the last partial batch of each epoch
  std::uint64_t seed = 0;
  DataFormat format = DataFormat::NCHW;
};

/// Batches of an InMemoryDataset, epoch by epoch, through Stages... in order.
template <class... Stages>
class EpochLoader {
 public:
  EpochLoader(const InMemoryDataset& set, const EpochLoaderOptions& opts, std::tuple<Stages...> stages = {})
      : set_(&set), opt_(opts), stages_(std::move(stages)) {
    if (opt_.batch_size == 0) throw ConfigError("EpochLoader: batch_size must be positive");
    if (set.size() == 0) throw ConfigError("EpochLoader: the data set holds no examples");
    if (opt_.drop_last && set.size() < opt_.batch_size)
      throw ConfigError(cifarnet::detail::concat(
          "EpochLoader: ", set.size(), " examples make no full batch of ", opt_.batch_size, " (drop_last)"));
    out_geom_ = set.geometry();
    std::apply([&](const auto&... s) { ((out_geom_ = s.output(out_geom_)), ...); }, stages_);
    start_epoch(0);
  }

  /// Serves epoch `e` from its first batch.
  void start_epoch(std::uint64_t e) {
    epoch_ = e;
    pos_ = 0;
    order_.resize(set_->size());
    std::iota(order_.begin(), order_.end(), std::size_t(0));
    if (opt_.shuffle) {
      Rng r = Rng::stream(detail::mix64(opt_.seed, 0x9u), e);
      for (std::size_t i = order_.size() - 1; i > 0; --i) std::swap(order_[i], order_[r.uniform_int(i + 1)]);
    }
  }

  /// The next batch of the current epoch; false at its end.
  bool next(Batch& out) {
    const std::size_t n = set_->size();
    if (pos_ >= n || (opt_.drop_last && n - pos_ < opt_.batch_size)) return false;
    const std::size_t b = std::min(opt_.batch_size, n - pos_);
    const Shape s{b, out_geom_.channels, out_geom_.height, out_geom_.width};
    if (out.images.shape() != typename Tensor<float>::shape_type(s.dims(opt_.format)))
      out.images = make_tensor<float>(s, opt_.format);
    out.labels.resize(b);
    out.index = epoch_ * batches_per_epoch() + pos_ / opt_.batch_size;
    const std::size_t hw = out_geom_.height * out_geom_.width, c = out_geom_.channels;
    for (std::size_t k = 0; k < b; ++k) {
      const std::size_t idx = order_[pos_ + k];
      img_ = set_->image(idx);
      Rng rng = Rng::stream(detail::mix64(opt_.seed, 0xA5u), epoch_ * n + pos_ + k);
      const ExampleContext ctx{idx, epoch_};
      std::apply([&](const auto&... st) { (st(img_, scratch_, ctx, rng), ...); }, stages_);
      float* dst = out.images.data() + k * hw * c;
      if (opt_.format == DataFormat::NHWC) {
        std::memcpy(dst, img_.data.data(), hw * c * sizeof(float));
      } else {
        for (std::size_t p = 0; p < hw; ++p)
          for (std::size_t ch = 0; ch < c; ++ch) dst[ch * hw + p] = img_.data[p * c + ch];
      }
      out.labels[k] = set_->label(idx);
    }
    pos_ += b;
    return true;
  }

  std::size_t batches_per_epoch() const {
    const std::size_t n = set_->size();
    return opt_.drop_last ? n / opt_.batch_size : (n + opt_.batch_size - 1) / opt_.batch_size;
  }
  std::uint64_t epoch() const { return epoch_; }
  ImageGeometry output_geometry() const { return out_geom_; }
  const EpochLoaderOptions& options() const { return opt_; }

 private:
  const InMemoryDataset* set_;
  EpochLoaderOptions opt_;
  std::tuple<Stages...> stages_;
  ImageGeometry out_geom_;
  std::uint64_t epoch_ = 0;
  std::size_t pos_ = 0;
  std::vector<std::size_t> order_;
  Image img_, scratch_;
};

}  // namespace data
}  // namespace cifarnet
