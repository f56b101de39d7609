// cifarnet/data/batch.hpp — what flows from an input pipeline to a
// trainer: the Batch, a position in a batch stream (PipelinePosition) and the
// interface every position-saveable stream implements (BatchStream).
//
// Kept apart from pipeline.hpp (threads, transforms) so that train/ can take
// batches and checkpoint a stream's position without the pipeline machinery:
//
//   data::BatchStream& s = pipeline;              // any data::Pipeline<...>
//   trainer.add_state(train::stream_position_saveable(s));  // "pipeline/train" in every checkpoint
//   trainer.run(s);                              // batches until max_steps
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "cifarnet/backend/host/bytes.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/core/tensor.hpp"

namespace cifarnet {
namespace data {

/// A point in a pipeline's batch stream, enough to resume exactly there.
/// Store it with to_words()/to_string(); restore() checks it against the
/// pipeline (same seed, data size and stream options).
struct PipelinePosition {
  std::uint64_t examples = 0;     ///< examples delivered so far
  std::uint64_t batches = 0;      ///< batches delivered so far
  std::uint64_t epoch = 0;        ///< epoch the shuffle reads from next (input side)
  std::uint64_t offset = 0;       ///< index within that epoch
  Rng::State rng{};               ///< shuffle generator (buffer mode; zero otherwise)
  std::uint64_t fingerprint = 0;  ///< hash of seed, data size and stream options

  static constexpr std::size_t kWords = 9;
  std::array<std::uint64_t, kWords> to_words() const {
    return {examples, batches, epoch, offset, rng[0], rng[1], rng[2], rng[3], fingerprint};
  }
  static PipelinePosition from_words(const std::array<std::uint64_t, kWords>& w) {
    PipelinePosition p;
    p.examples = w[0];
    p.batches = w[1];
    p.epoch = w[2];
    p.offset = w[3];
    p.rng = {w[4], w[5], w[6], w[7]};
    p.fingerprint = w[8];
    return p;
  }
  /// "pipeline-position-v1 <9 decimal words>".
  std::string to_string() const {
    std::ostringstream os;
    os << "pipeline-position-v1";
    for (auto w : to_words()) os << ' ' << w;
    return os.str();
  }
  static PipelinePosition parse(const std::string& s) {
    std::istringstream is(s);
    std::string tag;
    is >> tag;
    if (tag != "pipeline-position-v1")
      throw ConfigError("pipeline position '" + s + "': expected it to start with 'pipeline-position-v1'");
    std::array<std::uint64_t, kWords> w{};
    for (auto& x : w) {
      std::string tok;
      if (!(is >> tok) || tok.find_first_not_of("0123456789") != std::string::npos)
        throw ConfigError("pipeline position '" + s + "': expected 9 unsigned integers");
      try {
        x = std::stoull(tok);
      } catch (const std::exception&) {
        throw ConfigError("pipeline position '" + s + "': '" + tok + "' does not fit in 64 bits");
      }
    }
    std::string extra;
    if (is >> extra) throw ConfigError("pipeline position '" + s + "': unexpected '" + extra + "'");
    return from_words(w);
  }
  bool operator==(const PipelinePosition& o) const { return to_words() == o.to_words(); }
  bool operator!=(const PipelinePosition& o) const { return !(*this == o); }
};

/// One batch: images (in the pipeline's and the model's DataFormat),
/// labels, and its number in the stream. The one batch type of the library:
/// pipelines fill it, train::Trainer and train::evaluate consume it
/// (train::Batch is this type).
struct Batch {
  Tensor<float> images;
  std::vector<std::int32_t> labels;
  std::uint64_t index = 0;
  /// With PipelineOptions::byte_pixels: the images as bytes instead (then
  /// `images` is empty): image i's pixel_height x pixel_width x
  /// pixel_channels values interleaved (HWC) at pixels[i * h * w * c], the
  /// same values `images` would hold. A GPU model uploads these (a quarter
  /// of the bytes) and converts them on the device
  /// (Model::forward_pixels_on_device); elsewhere pixels_to_images converts.
  std::vector<std::uint8_t> pixels;
  std::size_t pixel_height = 0, pixel_width = 0, pixel_channels = 0;
  std::size_t size() const { return labels.size(); }
  /// Whether the images came as bytes (pixels) rather than floats.
  bool has_pixels() const { return images.size() == 0 && !pixels.empty(); }
};

/// A byte batch's images as the float tensor (n, c, h, w) in format `fmt`
/// that `images` would have been (each byte's value, exactly).
inline void pixels_to_images(const Batch& b, DataFormat fmt, Tensor<float>& out) {
  const std::size_t n = b.size(), h = b.pixel_height, w = b.pixel_width, c = b.pixel_channels;
  const std::size_t per = h * w * c;
  if (n == 0 || per == 0 || b.pixels.size() != n * per)
    throw ShapeError(cifarnet::detail::concat("batch of ", n, " byte images of ", h, "x", w, "x", c,
                                              " holds ", b.pixels.size(), " bytes"));
  ensure_shape(out, Shape{n, c, h, w}, fmt);
  backend::host::bytes_to_float(n, c, h, w, fmt, b.pixels.data(), out.data());
}

/// A stream of batches whose position can be saved and restored: what a
/// trainer reads and a checkpoint records. data::Pipeline implements it.
class BatchStream {
 public:
  virtual ~BatchStream() = default;
  /// Fills `out` with the next batch; false when a finite stream has ended.
  virtual bool next(Batch& out) = 0;
  /// The position after the last batch next() returned.
  virtual PipelinePosition position() const = 0;
  /// Continues from `pos` (ConfigError when it was saved by a different stream).
  virtual void restore(const PipelinePosition& pos) = 0;
  /// Back to the first batch, with the shuffle and augmentation seeded by
  /// `seed` (as a stream built with that seed).
  virtual void reseed(std::uint64_t seed) = 0;
};

}  // namespace data
}  // namespace cifarnet
