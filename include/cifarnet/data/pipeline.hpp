// cifarnet/data/pipeline.hpp — the input pipeline: repeat -> shuffle ->
// batch -> prefetch, with per-image transforms composed as types:
//
//   using Train = Pipeline<Cifar10Binary, PadCrop<4>, RandomFlipLR>;
//   Train train(Cifar10Binary(dir, Split::train), options);
//   Batch b; while (train.next(b)) { ... b.images, b.labels ... }
//
// Semantics (TensorFlow's dataset.repeat().shuffle().batch() order, TF_SEMANTICS.md §2):
// the source's examples are read in file order, epoch after epoch (forever,
// or `epochs` times); the shuffle draws from that stream (a buffer across
// epoch boundaries like tf.data, or one full permutation per epoch, or none);
// consecutive examples of the shuffled stream form batches, so a batch may
// straddle two epochs; a finite stream ends with a partial batch unless
// drop_remainder. Each example is decoded from uint8 to float once and
// transformed in HWC, then written into the batch tensor in the requested
// DataFormat.
//
// Determinism: the example stream is drawn on one generator in a fixed
// order, and example k of the stream is augmented with its own generator
// Rng::stream(seed', k). Batches reach the consumer in stream order whatever
// the number of workers, so the same seed gives the same batches with 0, 1
// or 8 workers. position() after a batch can be saved (9 uint64 words or a
// string) and restore() continues with exactly the batches that would have
// followed.
//
// Threads: `num_workers` background threads claim whole batches in order and
// fill them into a ring of `prefetch` batch slots; next() swaps the next slot
// into the caller's Batch (no copy; steady state allocates nothing). An
// exception in a worker is rethrown by next() when the consumer reaches that
// batch (and by every later call). The destructor stops and joins the
// workers even when the queue is full and nobody will consume again.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/data/batch.hpp"
#include "cifarnet/data/image.hpp"
#include "cifarnet/data/transforms.hpp"

namespace cifarnet {
namespace data {

/// How the example stream is shuffled.
enum class ShuffleMode {
  none,         ///< file order
  buffer,       ///< tf.data shuffle buffer (draws uniformly among the next `shuffle_buffer` examples)
  permutation,  ///< a fresh uniform permutation of the whole epoch, epoch after epoch
};

inline const char* to_string(ShuffleMode m) {
  return m == ShuffleMode::none ? "none" : m == ShuffleMode::buffer ? "buffer" : "permutation";
}

/// The seed's shuffle buffer: int(0.4 * examples per epoch) + 3 batches.
inline std::size_t default_shuffle_buffer(std::size_t examples_per_epoch, std::size_t batch_size) {
  return examples_per_epoch * 4 / 10 + 3 * batch_size;
}

/// Run-time options of a Pipeline (the transforms are its type).
struct PipelineOptions {
  std::size_t batch_size = 128;
  ShuffleMode shuffle = ShuffleMode::buffer;
  std::size_t shuffle_buffer = 0;  ///< buffer mode; 0 = default_shuffle_buffer()
  std::uint64_t epochs = 0;        ///< 0 = repeat forever
  bool drop_remainder = false;     ///< drop the last partial batch of a finite stream
  std::size_t num_workers = 2;     ///< background threads; 0 = work on the caller's thread
  std::size_t prefetch = 4;        ///< batches prepared ahead (queue capacity), >= 1
  std::uint64_t seed = 0;          ///< fixes shuffling and augmentation
  DataFormat format = DataFormat::NHWC;
  /// false: the per-image transforms are skipped (e.g. --use-distortion
  /// off): the batches are the source's images as decoded, in the same
  /// shuffled order, from the same pipeline type. Only for transforms that
  /// keep the image geometry (ConfigError otherwise), such as PadCrop and
  /// the random flips and colour changes.
  bool augment = true;
  /// true: batches carry their images as bytes (Batch::pixels, HWC per
  /// image) instead of floats, for a GPU model to upload a quarter of the
  /// bytes and convert them there. Only for pipelines whose images hold
  /// whole values in [0, 255] (PadCrop, flips: the ResNet recipe's); a value
  /// that is not one (after a colour transform, a standardization) is a
  /// ConfigError naming the example and the value.
  bool byte_pixels = false;

  void validate() const {
    if (batch_size == 0) throw ConfigError("pipeline option batch_size must be > 0");
    if (prefetch == 0) throw ConfigError("pipeline option prefetch must be >= 1");
    if (num_workers > 256)
      throw ConfigError(
          cifarnet::detail::concat("pipeline option num_workers = ", num_workers, " (at most 256)"));
  }
};

namespace detail {

inline std::uint64_t mix64(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The example stream: repeat + shuffle over indices 0..n-1. Sequential; a
/// few nanoseconds per example, so it runs under the pipeline's lock.
class Sampler {
 public:
  Sampler() = default;
  Sampler(std::size_t n, ShuffleMode mode, std::size_t buffer, std::uint64_t seed, std::uint64_t epochs)
      : n_(n), mode_(mode), buffer_size_(buffer), seed_(seed), epochs_(epochs), rng_(mix64(seed, 0x5u)) {
    if (mode_ != ShuffleMode::buffer) rng_.set_state({0, 0, 0, 0});
  }

  /// Next source index; false once a finite stream is exhausted.
  bool next(std::uint64_t& index) {
    if (mode_ != ShuffleMode::buffer) {
      if (exhausted_input()) return false;
      index = mode_ == ShuffleMode::none ? in_ % n_ : permuted(in_);
      ++in_;
      ++emitted_;
      return true;
    }
    while (buffer_.size() < buffer_size_ && !exhausted_input()) buffer_.push_back(in_++ % n_);
    if (buffer_.empty()) return false;
    const std::size_t j = static_cast<std::size_t>(rng_.uniform_int(buffer_.size()));
    index = buffer_[j];
    buffer_[j] = buffer_.back();
    buffer_.pop_back();
    ++emitted_;
    return true;
  }

  /// Advances by k examples (jumps for none/permutation, replays for buffer).
  void skip(std::uint64_t k) {
    if (mode_ != ShuffleMode::buffer) {
      const std::uint64_t limit = epochs_ ? epochs_ * n_ : std::numeric_limits<std::uint64_t>::max();
      const std::uint64_t step = std::min<std::uint64_t>(k, limit - in_);
      in_ += step;
      emitted_ += step;
      return;
    }
    std::uint64_t idx;
    for (std::uint64_t i = 0; i < k && next(idx); ++i) {
    }
  }

  std::uint64_t emitted() const { return emitted_; }
  std::uint64_t epoch() const { return in_ / n_; }
  std::uint64_t offset() const { return in_ % n_; }
  const Rng::State& rng_state() const { return rng_.state(); }

 private:
  bool exhausted_input() const { return epochs_ != 0 && in_ >= epochs_ * n_; }
  std::uint64_t permuted(std::uint64_t k) {
    const std::uint64_t e = k / n_;
    if (perm_.size() != n_ || perm_epoch_ != e) {
      perm_.resize(n_);
      for (std::size_t i = 0; i < n_; ++i) perm_[i] = i;
      Rng r = Rng::stream(mix64(seed_, 0x9u), e);
      for (std::size_t i = n_ - 1; i > 0; --i) std::swap(perm_[i], perm_[r.uniform_int(i + 1)]);
      perm_epoch_ = e;
    }
    return perm_[k % n_];
  }

  std::size_t n_ = 1;
  ShuffleMode mode_ = ShuffleMode::none;
  std::size_t buffer_size_ = 0;
  std::uint64_t seed_ = 0, epochs_ = 0;
  std::uint64_t in_ = 0, emitted_ = 0;
  Rng rng_;
  std::vector<std::uint64_t> buffer_;
  std::vector<std::uint64_t> perm_;
  std::uint64_t perm_epoch_ = 0;
};

template <class S, class = void>
struct is_source : std::false_type {};
template <class S>
struct is_source<S, std::void_t<decltype(std::size_t(std::declval<const S&>().size())),
                                decltype(ImageGeometry(std::declval<const S&>().geometry())),
                                decltype(std::int32_t(std::declval<const S&>().decode(
                                    std::size_t{}, std::declval<float*>())))>> : std::true_type {};

template <class T, class = void>
struct is_transform : std::false_type {};
template <class T>
struct is_transform<T,
                    std::void_t<decltype(ImageGeometry(std::declval<const T&>().output(ImageGeometry{}))),
                                decltype(std::declval<const T&>()(
                                    std::declval<Image&>(), std::declval<Image&>(), std::declval<Rng&>()))>>
    : std::true_type {};

}  // namespace detail

/// Input pipeline over `Source`, applying `Transforms...` to every image in
/// order. See the top of this file for the semantics.
template <class Source, class... Transforms>
class Pipeline : public BatchStream {
  static_assert(detail::is_source<Source>::value,
                "cifarnet: the first argument of Pipeline<...> must be a source with size(), geometry() and "
                "decode(i, float*) (see cifarnet/data/sources.hpp).");
  static_assert(
      (detail::is_transform<Transforms>::value && ...),
      "cifarnet: every argument after the source in Pipeline<...> must be a per-image transform with "
      "output(ImageGeometry) and operator()(Image&, Image&, Rng&) (see cifarnet/data/transforms.hpp).");

 public:
  using source_type = Source;
  using transforms_type = std::tuple<Transforms...>;

  /// A pipeline over a shared source (several pipelines may read one).
  Pipeline(std::shared_ptr<const Source> source, const PipelineOptions& options,
           transforms_type transforms = transforms_type{})
      : src_(std::move(source)), opt_(options), transforms_(std::move(transforms)) {
    if (!src_) throw ConfigError("Pipeline: null source");
    opt_.validate();
    if (src_->size() == 0) throw ConfigError("Pipeline: the source holds no examples");
    in_geom_ = src_->geometry();
    out_geom_ = in_geom_;
    std::apply([&](const auto&... t) { ((out_geom_ = t.output(out_geom_)), ...); }, transforms_);
    if (!opt_.augment && out_geom_ != in_geom_)
      throw ConfigError(cifarnet::detail::concat("pipeline option augment = false: the transforms turn ",
                                                 in_geom_.str(), " images into ", out_geom_.str(),
                                                 ", so they cannot be skipped; use a pipeline without them"));
    if (!opt_.augment) out_geom_ = in_geom_;
    buffer_ =
        opt_.shuffle_buffer ? opt_.shuffle_buffer : default_shuffle_buffer(src_->size(), opt_.batch_size);
    set_seed(opt_.seed);
    reset_state(initial_position());
  }
  /// A pipeline owning its source.
  explicit Pipeline(Source source, const PipelineOptions& options = PipelineOptions{},
                    transforms_type transforms = transforms_type{})
      : Pipeline(std::make_shared<const Source>(std::move(source)), options, std::move(transforms)) {}

  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;
  ~Pipeline() override { stop(); }

  /// Fills `out` with the next batch; false when a finite stream has ended.
  /// Rethrows an error a worker met while preparing this batch.
  bool next(Batch& out) override {
    if (opt_.num_workers == 0) return next_inline(out);
    std::unique_lock<std::mutex> lk(m_);
    if (!started_) start_locked();
    Slot& s = slots_[consumed_ % slots_.size()];
    const auto t0 = std::chrono::steady_clock::now();
    ready_cv_.wait(
        lk, [&] { return s.state == Slot::ready || s.state == Slot::failed || consumed_ >= end_job_; });
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return deliver_locked(s, out);
  }

  /// The position after the last batch next() returned.
  PipelinePosition position() const override {
    std::lock_guard<std::mutex> lk(m_);
    return position_;
  }

  /// Continues from `pos` (saved by a pipeline with the same source size,
  /// seed and stream options; ConfigError otherwise). Stops the workers,
  /// drops prepared batches, and replays the shuffle up to `pos`.
  void restore(const PipelinePosition& pos) override {
    stop();
    if (pos.fingerprint != fingerprint_)
      throw ConfigError(
          "pipeline position was saved by a pipeline with a different seed, data size or stream options "
          "(batch_size, shuffle, shuffle_buffer, epochs, drop_remainder)");
    detail::Sampler probe = make_sampler();
    probe.skip(pos.examples);
    if (probe.emitted() != pos.examples || probe.epoch() != pos.epoch || probe.offset() != pos.offset ||
        probe.rng_state() != pos.rng)
      throw ConfigError(cifarnet::detail::concat("pipeline position (", pos.examples,
                                                 " examples) does not match this pipeline's stream"));
    reset_state(pos, std::move(probe));
  }

  /// Back to the first batch.
  void reset() {
    stop();
    reset_state(initial_position());
  }

  /// Back to the first batch of the stream that seed `seed` gives: the same
  /// batches as a pipeline built with options().seed = seed.
  void reseed(std::uint64_t seed) override {
    stop();
    set_seed(seed);
    reset_state(initial_position());
  }

  /// The generator example number `k` of the stream is augmented with
  /// (each example gets its own, so results do not depend on threads).
  Rng example_rng(std::uint64_t k) const { return Rng::stream(aug_seed_, k); }

  /// Examples per epoch, counted by the source.
  std::size_t examples_per_epoch() const { return src_->size(); }
  /// Batches per epoch (ceil, or floor with drop_remainder) for one epoch alone.
  std::size_t batches_per_epoch() const {
    return opt_.drop_remainder ? src_->size() / opt_.batch_size
                               : (src_->size() + opt_.batch_size - 1) / opt_.batch_size;
  }
  /// The shuffle buffer in use (buffer mode).
  std::size_t shuffle_buffer() const { return buffer_; }
  ImageGeometry input_geometry() const { return in_geom_; }
  ImageGeometry output_geometry() const { return out_geom_; }
  const PipelineOptions& options() const { return opt_; }
  const Source& source() const { return *src_; }
  /// Seconds next() spent waiting for a batch that was not ready yet.
  double wait_seconds() const {
    std::lock_guard<std::mutex> lk(m_);
    return wait_seconds_;
  }

 private:
  struct Slot {
    enum State { free, filling, ready, failed };
    State state = free;
    Batch batch;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> items;  // (source index, stream number)
    PipelinePosition after;
    std::exception_ptr error;
  };
  struct Scratch {
    Image img, tmp;
  };

  void set_seed(std::uint64_t seed) {
    opt_.seed = seed;
    aug_seed_ = detail::mix64(opt_.seed, 0xA5u);
    fingerprint_ = detail::mix64(
        detail::mix64(detail::mix64(opt_.seed, src_->size()),
                      detail::mix64(static_cast<std::uint64_t>(opt_.shuffle),
                                    opt_.shuffle == ShuffleMode::buffer ? buffer_ : 0)),
        detail::mix64(detail::mix64(opt_.batch_size, opt_.epochs), opt_.drop_remainder ? 1 : 0));
  }

  detail::Sampler make_sampler() const {
    return detail::Sampler(src_->size(), opt_.shuffle, buffer_, opt_.seed, opt_.epochs);
  }
  PipelinePosition snapshot(const detail::Sampler& s, std::uint64_t batches) const {
    PipelinePosition p;
    p.examples = s.emitted();
    p.batches = batches;
    p.epoch = s.epoch();
    p.offset = s.offset();
    p.rng = s.rng_state();
    p.fingerprint = fingerprint_;
    return p;
  }
  PipelinePosition initial_position() const { return snapshot(make_sampler(), 0); }

  void reset_state(const PipelinePosition& pos) {
    detail::Sampler s = make_sampler();
    s.skip(pos.examples);
    reset_state(pos, std::move(s));
  }
  void reset_state(const PipelinePosition& pos, detail::Sampler sampler) {
    std::lock_guard<std::mutex> lk(m_);
    sampler_ = std::move(sampler);
    slots_.resize(opt_.num_workers == 0 ? 1 : opt_.prefetch);
    for (auto& s : slots_) {
      s.state = Slot::free;
      s.error = nullptr;
    }
    next_job_ = consumed_ = pos.batches;
    end_job_ = std::numeric_limits<std::uint64_t>::max();
    failed_ = false;
    position_ = pos;
  }

  void start_locked() {
    started_ = true;
    for (std::size_t i = 0; i < opt_.num_workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
    std::lock_guard<std::mutex> lk(m_);
    stop_ = false;
    started_ = false;
  }

  // Takes the next batch's examples from the sampler (lock held). False at
  // the end of the stream.
  bool claim_locked(std::uint64_t& job) {
    if (next_job_ >= end_job_) return false;
    Slot& s = slots_[next_job_ % slots_.size()];
    s.items.clear();
    std::uint64_t idx;
    while (s.items.size() < opt_.batch_size && sampler_.next(idx))
      s.items.emplace_back(idx, sampler_.emitted() - 1);
    if (s.items.empty() || (s.items.size() < opt_.batch_size && opt_.drop_remainder)) {
      end_job_ = next_job_;
      work_cv_.notify_all();
      ready_cv_.notify_all();
      return false;
    }
    if (s.items.size() < opt_.batch_size) end_job_ = next_job_ + 1;
    s.after = snapshot(sampler_, next_job_ + 1);
    s.state = Slot::filling;
    job = next_job_++;
    return true;
  }

  void worker_loop() {
    Scratch scratch;
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
      work_cv_.wait(lk, [&] {
        return stop_ || failed_ || next_job_ >= end_job_ || next_job_ < consumed_ + slots_.size();
      });
      if (stop_ || failed_) return;
      std::uint64_t job;
      if (!claim_locked(job)) return;
      Slot& s = slots_[job % slots_.size()];
      lk.unlock();
      std::exception_ptr err;
      try {
        fill(s, scratch);
      } catch (...) {
        err = std::current_exception();
      }
      lk.lock();
      if (err) {
        s.error = err;
        s.state = Slot::failed;
        failed_ = true;
        work_cv_.notify_all();
      } else {
        s.state = Slot::ready;
      }
      ready_cv_.notify_all();
    }
  }

  bool next_inline(Batch& out) {
    std::unique_lock<std::mutex> lk(m_);
    Slot& s = slots_[consumed_ % slots_.size()];
    if (s.state != Slot::failed) {
      std::uint64_t job;
      if (!claim_locked(job)) return false;
      lk.unlock();
      try {
        fill(s, inline_scratch_);
        lk.lock();
        s.state = Slot::ready;
      } catch (...) {
        lk.lock();
        s.error = std::current_exception();
        s.state = Slot::failed;
        failed_ = true;
      }
    }
    return deliver_locked(s, out);
  }

  bool deliver_locked(Slot& s, Batch& out) {
    if (s.state == Slot::failed) std::rethrow_exception(s.error);
    if (s.state != Slot::ready) return false;  // end of a finite stream
    std::swap(out.images, s.batch.images);
    std::swap(out.labels, s.batch.labels);
    std::swap(out.pixels, s.batch.pixels);
    out.pixel_height = s.batch.pixel_height;
    out.pixel_width = s.batch.pixel_width;
    out.pixel_channels = s.batch.pixel_channels;
    out.index = consumed_;
    position_ = s.after;
    s.state = Slot::free;
    ++consumed_;
    work_cv_.notify_all();
    return true;
  }

  // Decodes, transforms and writes the slot's examples into its batch.
  void fill(Slot& s, Scratch& sc) const {
    const std::size_t n = s.items.size(), per = out_geom_.size();
    const Shape shape{n, out_geom_.channels, out_geom_.height, out_geom_.width};
    if (opt_.byte_pixels) {
      s.batch.images = Tensor<float>();
      s.batch.pixels.resize(n * per);
      s.batch.pixel_height = out_geom_.height;
      s.batch.pixel_width = out_geom_.width;
      s.batch.pixel_channels = out_geom_.channels;
    } else {
      ensure_shape(s.batch.images, shape, opt_.format);
      s.batch.pixels.clear();
    }
    s.batch.labels.resize(n);
    float* dst = opt_.byte_pixels ? nullptr : s.batch.images.data();
    for (std::size_t i = 0; i < n; ++i) {
      sc.img.reshape(in_geom_.height, in_geom_.width, in_geom_.channels);
      s.batch.labels[i] = src_->decode(static_cast<std::size_t>(s.items[i].first), sc.img.data.data());
      Rng rng = example_rng(s.items[i].second);
      if (opt_.augment) std::apply([&](const auto&... t) { (t(sc.img, sc.tmp, rng), ...); }, transforms_);
      if (sc.img.geometry() != out_geom_)
        throw ShapeError(cifarnet::detail::concat("Pipeline: transforms produced an image of ",
                                                  sc.img.geometry().str(), ", expected ", out_geom_.str()));
      if (opt_.byte_pixels) {
        const float* p = sc.img.data.data();
        std::uint8_t* b = s.batch.pixels.data() + i * per;
        for (std::size_t q = 0; q < per; ++q) {
          const float v = p[q];
          if (!(v >= 0.0f && v <= 255.0f && v == float(int(v))))
            throw ConfigError(cifarnet::detail::concat(
                "pipeline option byte_pixels: example ", s.items[i].first, " holds ", v,
                " after the transforms, not a byte value (a colour transform or standardization needs float "
                "batches)"));
          b[q] = std::uint8_t(v);
        }
        continue;
      }
      float* o = dst + i * per;
      if (opt_.format == DataFormat::NHWC) {
        std::memcpy(o, sc.img.data.data(), per * sizeof(float));
      } else {
        const std::size_t c = out_geom_.channels, plane = out_geom_.height * out_geom_.width;
        const float* p = sc.img.data.data();
        for (std::size_t k = 0; k < c; ++k)
          for (std::size_t q = 0; q < plane; ++q) o[k * plane + q] = p[q * c + k];
      }
    }
  }

  std::shared_ptr<const Source> src_;
  PipelineOptions opt_;
  transforms_type transforms_;
  ImageGeometry in_geom_, out_geom_;
  std::size_t buffer_ = 0;
  std::uint64_t aug_seed_ = 0, fingerprint_ = 0;

  mutable std::mutex m_;
  std::condition_variable work_cv_, ready_cv_;
  detail::Sampler sampler_;
  std::vector<Slot> slots_;
  std::uint64_t next_job_ = 0, consumed_ = 0, end_job_ = 0;
  bool stop_ = false, failed_ = false, started_ = false;
  std::vector<std::thread> workers_;
  PipelinePosition position_;
  Scratch inline_scratch_;
  double wait_seconds_ = 0;
};

}  // namespace data
}  // namespace cifarnet
