// cifarnet/io/tfevents.hpp — TensorBoard event files: writer and reader.
//
// A file `events.out.tfevents.<%010d seconds>.<host>[suffix]` holds TFRecord-
// framed (io/tfrecord.hpp) `tensorboard.Event` protos: first one with
// file_version "brain.Event:2" (and SourceMetadata.writer when set), then one
// Event per summary call with wall_time, step and a Summary of values:
// scalars (simple_value), histograms (HistogramProto, TF's default buckets)
// and images (Summary.Image with PNG bytes).
//
// Beside the single values, two summaries of the TF CIFAR-10 tutorial:
// add_activation_summary (its _activation_summary: a histogram
// "<name>/activations" and the scalar "<name>/sparsity", tf.nn.zero_fraction)
// and add_images (tf.summary.image on a float batch: up to max_outputs
// images, "<tag>/image/<i>", each rescaled to bytes as TF's image summary
// op does).
//
// Why the protobuf wire format is encoded by hand (io/protobuf.hpp): the four
// small messages (Event, Summary, HistogramProto, Summary.Image) need a
// dozen fields; libprotobuf would add a compiled dependency, generated code
// and .proto files to a header-only library. Field numbers are those of
// tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto
// (tensorboard/compat/proto/*.proto carries the same):
//   Event: wall_time 1 (double), step 2 (int64), file_version 3 (string),
//          summary 5 (Summary), source_metadata 10 (SourceMetadata{writer 1})
//   Summary: value 1 (repeated Value)
//   Value: tag 1, simple_value 2 (float), image 4, histo 5, node_name 7,
//          metadata 9 (simple_value/image/histo share a oneof)
//   HistogramProto: min 1, max 2, num 3, sum 4, sum_squares 5 (double),
//          bucket_limit 6, bucket 7 (packed repeated double)
//   Image: height 1, width 2, colorspace 3 (int32), encoded_image_string 4
// tests/io/test_tfevents.cpp checks the bytes against files written by
// TensorBoard's own EventFileWriter and TensorFlow's summary ops.
//
// Flush policy: events are buffered and written when max_queue are pending,
// when flush_secs have passed since the last flush (checked as events
// arrive; there is no background thread), on flush(), close() and
// destruction. An EventWriter is not thread-safe: use one per thread or
// guard it.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <variant>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/io/file.hpp"
#include "cifarnet/io/png.hpp"
#include "cifarnet/io/protobuf.hpp"
#include "cifarnet/io/tfrecord.hpp"

namespace cifarnet::io {

// ------------------------------------------------------------------ messages

/// tensorboard.HistogramProto.
struct HistogramProto {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit;  ///< upper edge of each bucket
  std::vector<double> bucket;        ///< count in each bucket
  bool operator==(const HistogramProto& o) const {
    return min == o.min && max == o.max && num == o.num && sum == o.sum && sum_squares == o.sum_squares &&
           bucket_limit == o.bucket_limit && bucket == o.bucket;
  }
};

/// tensorboard.Summary.Image.
struct ImageSummary {
  int height = 0, width = 0;
  int colorspace = 0;   ///< 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA
  std::string encoded;  ///< encoded_image_string (PNG)
};

/// A Summary value of a kind this reader does not interpret (audio, tensor,
/// old-style histogram): its field number and raw bytes.
struct OtherValue {
  int field = 0;
  std::string bytes;
};

/// tensorboard.Summary.Value.
struct SummaryValue {
  std::string tag;
  std::variant<float, HistogramProto, ImageSummary, OtherValue> value = 0.0f;
  std::string node_name;  ///< rarely used
  std::string metadata;   ///< raw SummaryMetadata bytes, written as given

  bool is_scalar() const { return std::holds_alternative<float>(value); }
  bool is_histogram() const { return std::holds_alternative<HistogramProto>(value); }
  bool is_image() const { return std::holds_alternative<ImageSummary>(value); }
  float scalar() const { return std::get<float>(value); }
  const HistogramProto& histogram() const { return std::get<HistogramProto>(value); }
  const ImageSummary& image() const { return std::get<ImageSummary>(value); }
};

/// tensorboard.SessionLog: START tells TensorBoard that training (re)started
/// at the event's step, so it drops the events of an earlier run with that
/// step or later (what a run killed after its last checkpoint logged).
struct SessionLog {
  enum Status { kUnspecified = 0, kStart = 1, kStop = 2, kCheckpoint = 3 };
  int status = kUnspecified;
  std::string checkpoint_path;
  std::string msg;
};

/// tensorboard.Event (the parts cifarnet writes and reads).
struct Event {
  double wall_time = 0;  ///< seconds since the epoch
  std::int64_t step = 0;
  std::optional<std::string> file_version;           ///< "brain.Event:2" in the first event
  std::optional<std::vector<SummaryValue>> summary;  ///< set for summary events
  std::optional<std::string> source_writer;          ///< SourceMetadata.writer
  std::optional<SessionLog> session_log;             ///< set for session-log events
  int other_kind = 0;  ///< field number of another `what` (graph_def...), else 0
};

namespace detail {
inline std::string encode_histogram(const HistogramProto& h) {
  std::string s;
  pb::put_double(s, 1, h.min);
  pb::put_double(s, 2, h.max);
  pb::put_double(s, 3, h.num);
  pb::put_double(s, 4, h.sum);
  pb::put_double(s, 5, h.sum_squares);
  pb::put_packed_doubles(s, 6, h.bucket_limit);
  pb::put_packed_doubles(s, 7, h.bucket);
  return s;
}
inline std::string encode_image(const ImageSummary& im) {
  std::string s;
  pb::put_int(s, 1, im.height);
  pb::put_int(s, 2, im.width);
  pb::put_int(s, 3, im.colorspace);
  pb::put_bytes(s, 4, im.encoded);
  return s;
}
inline std::string encode_value(const SummaryValue& v) {
  std::string s;
  pb::put_bytes(s, 1, v.tag);
  if (const float* f = std::get_if<float>(&v.value)) pb::put_float(s, 2, *f, /*always: oneof*/ true);
  if (const auto* im = std::get_if<ImageSummary>(&v.value)) pb::put_bytes(s, 4, encode_image(*im), true);
  if (const auto* h = std::get_if<HistogramProto>(&v.value)) pb::put_bytes(s, 5, encode_histogram(*h), true);
  if (const auto* o = std::get_if<OtherValue>(&v.value)) {
    if (o->field != 3 && o->field != 6 && o->field != 8)
      throw ConfigError(cifarnet::detail::concat("summary value '", v.tag, "': field ", o->field,
                                                 " is not a Summary.Value kind (3, 6 or 8)"));
    pb::put_bytes(s, o->field, o->bytes, true);
  }
  pb::put_bytes(s, 7, v.node_name);
  pb::put_bytes(s, 9, v.metadata);
  return s;
}
}  // namespace detail

/// The Event's protobuf bytes.
inline std::string encode_event(const Event& e) {
  std::string s;
  pb::put_double(s, 1, e.wall_time);
  pb::put_int(s, 2, e.step);
  if (e.file_version) pb::put_bytes(s, 3, *e.file_version, true);
  if (e.summary) {
    std::string sum;
    for (const auto& v : *e.summary) pb::put_bytes(sum, 1, detail::encode_value(v), true);
    pb::put_bytes(s, 5, sum, true);
  }
  if (e.session_log) {
    std::string l;
    pb::put_int(l, 1, e.session_log->status);
    pb::put_bytes(l, 2, e.session_log->checkpoint_path);
    pb::put_bytes(l, 3, e.session_log->msg);
    pb::put_bytes(s, 7, l, true);
  }
  if (e.source_writer) {
    std::string sm;
    pb::put_bytes(sm, 1, *e.source_writer);
    pb::put_bytes(s, 10, sm, true);
  }
  return s;
}

namespace detail {
inline HistogramProto decode_histogram(pb::Reader r) {
  HistogramProto h;
  int f, w;
  while (!r.done()) {
    r.next(f, w);
    if (f >= 1 && f <= 5) {
      r.expect(w, pb::kFixed64, "HistogramProto scalar");
      const double d = r.read_double();
      (f == 1 ? h.min : f == 2 ? h.max : f == 3 ? h.num : f == 4 ? h.sum : h.sum_squares) = d;
    } else if (f == 6) {
      r.doubles(w, h.bucket_limit);
    } else if (f == 7) {
      r.doubles(w, h.bucket);
    } else {
      r.skip(w);
    }
  }
  if (h.bucket.size() != h.bucket_limit.size())
    throw r.error(r.offset(), cifarnet::detail::concat("histogram has ", h.bucket_limit.size(),
                                                       " bucket limits but ", h.bucket.size(), " buckets"));
  return h;
}
inline ImageSummary decode_image(pb::Reader r) {
  ImageSummary im;
  int f, w;
  while (!r.done()) {
    r.next(f, w);
    if (f >= 1 && f <= 3) {
      r.expect(w, pb::kVarint, "Image size field");
      const auto v = static_cast<int>(static_cast<std::int32_t>(r.varint()));
      (f == 1 ? im.height : f == 2 ? im.width : im.colorspace) = v;
    } else if (f == 4) {
      r.expect(w, pb::kLengthDelimited, "encoded_image_string");
      im.encoded = std::string(r.bytes());
    } else {
      r.skip(w);
    }
  }
  return im;
}
/// The embedded message `what`; errors inside it start with its name.
inline pb::Reader sub(pb::Reader& r, int wire, const char* what) { return r.message(wire, what, what); }
inline SummaryValue decode_value(pb::Reader r) {
  SummaryValue v;
  int f, w;
  while (!r.done()) {
    r.next(f, w);
    switch (f) {
      case 1:
        r.expect(w, pb::kLengthDelimited, "tag");
        v.tag = std::string(r.bytes());
        break;
      case 2:
        r.expect(w, pb::kFixed32, "simple_value");
        v.value = r.read_float();
        break;
      case 4:
        v.value = decode_image(sub(r, w, "Summary.Image"));
        break;
      case 5:
        v.value = decode_histogram(sub(r, w, "HistogramProto"));
        break;
      case 3:
      case 6:
      case 8:
        r.expect(w, pb::kLengthDelimited, "summary value");
        v.value = OtherValue{f, std::string(r.bytes())};
        break;
      case 7:
        r.expect(w, pb::kLengthDelimited, "node_name");
        v.node_name = std::string(r.bytes());
        break;
      case 9:
        r.expect(w, pb::kLengthDelimited, "metadata");
        v.metadata = std::string(r.bytes());
        break;
      default:
        r.skip(w);
    }
  }
  return v;
}
}  // namespace detail

/// Parses an Event's protobuf bytes; `file` and `offset` locate them for errors.
inline Event decode_event(std::string_view bytes, const std::string& file, std::uint64_t offset) {
  pb::Reader r(bytes, file, offset, "Event");
  Event e;
  int f, w;
  while (!r.done()) {
    r.next(f, w);
    switch (f) {
      case 1:
        r.expect(w, pb::kFixed64, "wall_time");
        e.wall_time = r.read_double();
        break;
      case 2:
        r.expect(w, pb::kVarint, "step");
        e.step = static_cast<std::int64_t>(r.varint());
        break;
      case 3:
        r.expect(w, pb::kLengthDelimited, "file_version");
        e.file_version = std::string(r.bytes());
        break;
      case 5: {
        auto s = detail::sub(r, w, "Summary");
        std::vector<SummaryValue> values;
        int sf, sw;
        while (!s.done()) {
          s.next(sf, sw);
          if (sf == 1)
            values.push_back(detail::decode_value(detail::sub(s, sw, "Summary.Value")));
          else
            s.skip(sw);
        }
        e.summary = std::move(values);
        break;
      }
      case 10: {
        auto s = detail::sub(r, w, "SourceMetadata");
        e.source_writer = std::string();
        int sf, sw;
        while (!s.done()) {
          s.next(sf, sw);
          if (sf == 1) {
            s.expect(sw, pb::kLengthDelimited, "writer");
            e.source_writer = std::string(s.bytes());
          } else {
            s.skip(sw);
          }
        }
        break;
      }
      case 7: {
        auto s = detail::sub(r, w, "SessionLog");
        SessionLog l;
        int sf, sw;
        while (!s.done()) {
          s.next(sf, sw);
          if (sf == 1) {
            s.expect(sw, pb::kVarint, "status");
            l.status = static_cast<int>(s.varint());
          } else if (sf == 2) {
            s.expect(sw, pb::kLengthDelimited, "checkpoint_path");
            l.checkpoint_path = std::string(s.bytes());
          } else if (sf == 3) {
            s.expect(sw, pb::kLengthDelimited, "msg");
            l.msg = std::string(s.bytes());
          } else {
            s.skip(sw);
          }
        }
        e.session_log = std::move(l);
        break;
      }
      default:
        if (f >= 4 && f <= 9) e.other_kind = f;
        r.skip(w);
    }
  }
  return e;
}

/// Every event of an event file, in order (DataError naming the file and the
/// byte offset on a truncated or corrupt record or event).
inline std::vector<Event> read_events(const std::string& path) {
  RecordReader rr(path);
  std::vector<Event> out;
  while (auto rec = rr.next()) out.push_back(decode_event(rec->data, path, rec->offset + 12));
  return out;
}

// ---------------------------------------------------------------- histograms

/// TensorFlow's histogram (tensorflow/core/lib/histogram/histogram.cc), as
/// used by tf.summary.histogram in TF 1.x: default bucket limits grow by 10%
/// from 1e-12 to 1e20 on each side of 0, plus ±DBL_MAX; a value goes to the
/// first bucket whose limit is greater than it.
class Histogram {
 public:
  Histogram() : Histogram(default_limits()) {}
  /// Custom limits: strictly increasing; values above the last one go to the last bucket.
  explicit Histogram(std::vector<double> limits) : limits_(std::move(limits)), counts_(limits_.size(), 0.0) {
    if (limits_.empty()) throw ConfigError("Histogram: no bucket limits");
    for (std::size_t i = 1; i < limits_.size(); ++i)
      if (!(limits_[i - 1] < limits_[i]))
        throw ConfigError("Histogram: bucket limits must be strictly increasing");
    min_ = limits_.back();
    max_ = -DBL_MAX;
  }

  /// TF's default limits (1549 of them).
  static const std::vector<double>& default_limits() {
    static const std::vector<double> limits = [] {
      std::vector<double> pos, neg;
      double v = 1.0e-12;
      while (v < 1.0e20) {
        pos.push_back(v);
        neg.push_back(-v);
        v *= 1.1;
      }
      pos.push_back(DBL_MAX);
      neg.push_back(-DBL_MAX);
      std::vector<double> all(neg.rbegin(), neg.rend());
      all.push_back(0.0);
      all.insert(all.end(), pos.begin(), pos.end());
      return all;
    }();
    return limits;
  }

  void add(double value) {
    std::size_t b =
        static_cast<std::size_t>(std::upper_bound(limits_.begin(), limits_.end(), value) - limits_.begin());
    if (b >= counts_.size()) b = counts_.size() - 1;
    counts_[b] += 1.0;
    if (min_ > value) min_ = value;
    if (max_ < value) max_ = value;
    num_ += 1.0;
    sum_ += value;
    sum_squares_ += value * value;
  }

  /// The proto; runs of empty buckets merge into one (TF's
  /// preserve_zero_buckets = false) unless `preserve_zero_buckets`.
  HistogramProto encode(bool preserve_zero_buckets = false) const {
    HistogramProto p;
    p.min = min_;
    p.max = max_;
    p.num = num_;
    p.sum = sum_;
    p.sum_squares = sum_squares_;
    for (std::size_t i = 0; i < counts_.size();) {
      double end = limits_[i], count = counts_[i];
      ++i;
      if (!preserve_zero_buckets && count <= 0.0) {
        while (i < counts_.size() && counts_[i] <= 0.0) {
          end = limits_[i];
          count = counts_[i];
          ++i;
        }
      }
      p.bucket_limit.push_back(end);
      p.bucket.push_back(count);
    }
    return p;
  }

  double num() const { return num_; }

 private:
  std::vector<double> limits_, counts_;
  double min_, max_, num_ = 0, sum_ = 0, sum_squares_ = 0;
};

// -------------------------------------------------------------------- writer

/// Options of EventWriter.
struct EventWriterOptions {
  double flush_secs = 120;                 ///< flush when this long has passed since the last flush (TF: 120)
  std::size_t max_queue = 10;              ///< flush when this many events are pending (TF: 10)
  std::string filename_suffix;             ///< appended to the file name
  std::string source_writer = "cifarnet";  ///< SourceMetadata.writer of the first event; empty: omitted
  std::function<double()> clock;           ///< seconds since the epoch (tests fix it); default: system clock
  std::string hostname;                    ///< default: gethostname()
};

/// Writes a TensorBoard event file into a log directory.
class EventWriter {
 public:
  /// Creates `logdir` if needed and the file events.out.tfevents.<time>.<host>
  /// (".1", ".2"... appended if that name exists), then writes the
  /// file_version event and flushes it.
  explicit EventWriter(const std::string& logdir, EventWriterOptions options = {})
      : opt_(std::move(options)) {
    if (!opt_.clock)
      opt_.clock = [] {
        return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      };
    if (opt_.hostname.empty()) {
      char host[256] = {};
      if (::gethostname(host, sizeof host - 1) != 0 || !host[0])
        std::snprintf(host, sizeof host, "localhost");
      opt_.hostname = host;
    }
    std::error_code ec;
    std::filesystem::create_directories(logdir, ec);
    if (ec || !std::filesystem::is_directory(logdir))
      throw IoError(cifarnet::detail::concat("cannot create log directory '", logdir,
                                             "': ", ec ? ec.message() : "not a directory"));
    const double now = opt_.clock();
    char stamp[32];
    std::snprintf(stamp, sizeof stamp, "%010lld", static_cast<long long>(now));
    const std::string base =
        logdir + "/events.out.tfevents." + stamp + "." + opt_.hostname + opt_.filename_suffix;
    std::string path = base;
    for (int k = 1; std::filesystem::exists(path); ++k) path = base + "." + std::to_string(k);
    writer_.emplace(path);
    Event first;
    first.wall_time = now;
    first.file_version = "brain.Event:2";
    if (!opt_.source_writer.empty()) first.source_writer = opt_.source_writer;
    writer_->write(encode_event(first));
    flush();
  }
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;
  ~EventWriter() = default;  // the RecordWriter flushes and closes

  const std::string& path() const { return writer_->path(); }

  /// Writes an event as given (its own wall_time and step).
  void add_event(const Event& e) {
    writer_->write(encode_event(e));
    maybe_flush();
  }
  /// Writes a SessionLog START at `step` (TF's MonitoredSession does this
  /// when a session starts): TensorBoard then drops the events of earlier
  /// runs in this directory with that step or later.
  void add_session_start(std::int64_t step, const std::string& checkpoint_path = "") {
    Event e;
    e.wall_time = opt_.clock();
    e.step = step;
    e.session_log = SessionLog{SessionLog::kStart, checkpoint_path, ""};
    add_event(e);
    flush();
  }
  /// The writer's clock now: seconds since the epoch (what it stamps
  /// events with; EventWriterOptions::clock).
  double now() const { return opt_.clock(); }
  /// Writes one Summary event with the given values, stamped with the clock,
  /// or with `wall_time` where given (a caller that decided on one reading
  /// of now(): SummaryHook's save_summaries_secs).
  void add_summary(std::vector<SummaryValue> values, std::int64_t step,
                   std::optional<double> wall_time = std::nullopt) {
    Event e;
    e.wall_time = wall_time ? *wall_time : opt_.clock();
    e.step = step;
    e.summary = std::move(values);
    add_event(e);
  }
  /// A scalar (Summary.Value.simple_value, stored as float like TF).
  void add_scalar(const std::string& tag, double value, std::int64_t step,
                  std::optional<double> wall_time = std::nullopt) {
    SummaryValue v;
    v.tag = tag;
    v.value = static_cast<float>(value);
    add_summary({std::move(v)}, step, wall_time);
  }
  /// A histogram already built.
  void add_histogram(const std::string& tag, const Histogram& h, std::int64_t step,
                     std::optional<double> wall_time = std::nullopt) {
    SummaryValue v;
    v.tag = tag;
    v.value = h.encode();
    add_summary({std::move(v)}, step, wall_time);
  }
  /// A histogram of `n` values with TF's default buckets (as
  /// tf.summary.histogram). NaN or Inf is a NumericsError naming the tag.
  template <class T>
  void add_histogram(const std::string& tag, const T* values, std::size_t n, std::int64_t step,
                     std::optional<double> wall_time = std::nullopt) {
    add_histogram(tag, finite_histogram(tag, values, n), step, wall_time);
  }
  template <class Container>
  void add_histogram(const std::string& tag, const Container& values, std::int64_t step) {
    add_histogram(tag, std::data(values), std::size(values), step);
  }
  /// The histogram of `n` values with TF's default buckets; NaN or Inf is a
  /// NumericsError naming the tag.
  template <class T>
  static Histogram finite_histogram(const std::string& tag, const T* values, std::size_t n) {
    Histogram h;
    for (std::size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(values[i]);
      if (!std::isfinite(d))
        throw NumericsError(cifarnet::detail::concat("NaN or Inf in summary histogram for: ", tag, " (value ",
                                                     d, " at index ", i, ")"));
      h.add(d);
    }
    return h;
  }
  /// An 8-bit HWC image (1 to 4 channels), PNG-encoded.
  void add_image(const std::string& tag, const std::uint8_t* pixels, int height, int width, int channels,
                 std::int64_t step) {
    add_image_encoded(tag, encode_png(pixels, height, width, channels), height, width, channels, step);
  }
  /// An image already encoded (PNG or JPEG bytes).
  void add_image_encoded(const std::string& tag, std::string encoded, int height, int width, int colorspace,
                         std::int64_t step) {
    SummaryValue v;
    v.tag = tag;
    v.value = ImageSummary{height, width, colorspace, std::move(encoded)};
    add_summary({std::move(v)}, step);
  }

  /// The CIFAR-10 tutorial's _activation_summary(x): a histogram
  /// "<name>/activations" of the `n` values and the scalar "<name>/sparsity",
  /// their zero_fraction, in one event. NaN or Inf is a NumericsError naming
  /// the histogram's tag.
  template <class T>
  void add_activation_summary(const std::string& name, const T* values, std::size_t n, std::int64_t step) {
    const std::string tag = name + "/activations";
    const Histogram h = finite_histogram(tag, values, n);
    SummaryValue hist, sparsity;
    hist.tag = tag;
    hist.value = h.encode();
    sparsity.tag = name + "/sparsity";
    sparsity.value = float(zero_fraction(values, n));
    add_summary({std::move(hist), std::move(sparsity)}, step);
  }

  /// tf.summary.image(tag, images, max_outputs) on a float batch of `n`
  /// images, `h` x `w` x `c` each (c = 1, 3 or 4), interleaved (NHWC): the
  /// first min(n, max_outputs) images, tagged "<tag>/image/<i>" ("<tag>/image"
  /// when max_outputs is 1), in one event. Each image is rescaled to bytes
  /// on its own (image_to_bytes, TF's rule). ConfigError on a bad shape or a
  /// max_outputs below 1.
  void add_images(const std::string& tag, const float* nhwc, std::size_t n, std::size_t h, std::size_t w,
                  std::size_t c, std::int64_t step, std::size_t max_outputs = 3) {
    if (max_outputs < 1) throw ConfigError("add_images '" + tag + "': max_outputs must be at least 1");
    if (!(c == 1 || c == 3 || c == 4) || h == 0 || w == 0)
      throw ConfigError(cifarnet::detail::concat("add_images '", tag, "': cannot show ", h, "x", w, "x", c,
                                                 " images (need positive sizes and 1, 3 or 4 channels)"));
    std::vector<SummaryValue> values;
    std::vector<std::uint8_t> bytes(h * w * c);
    for (std::size_t i = 0; i < std::min(n, max_outputs); ++i) {
      image_to_bytes(nhwc + i * h * w * c, h * w, c, bytes.data());
      SummaryValue v;
      v.tag = max_outputs == 1 ? tag + "/image" : tag + "/image/" + std::to_string(i);
      v.value = ImageSummary{int(h), int(w), int(c), encode_png(bytes.data(), int(h), int(w), int(c))};
      values.push_back(std::move(v));
    }
    add_summary(std::move(values), step);
  }

  /// tf.nn.zero_fraction: the fraction of the `n` values that are exactly
  /// zero (0 for none).
  template <class T>
  static double zero_fraction(const T* values, std::size_t n) {
    std::size_t zeros = 0;
    for (std::size_t i = 0; i < n; ++i) zeros += values[i] == T(0);
    return n ? double(zeros) / double(n) : 0.0;
  }

  /// TF's image summary op on one float image of `pixels` pixels of `c`
  /// channels: with no negative value, scaled so that the largest becomes
  /// 255; otherwise scaled by 127 / (largest magnitude) and offset by 128
  /// (a largest value or magnitude below 1e-6: scale 0); then truncated to
  /// bytes. The minimum and maximum are over the finite values; a pixel
  /// with a NaN or Inf channel is drawn in TF's bad colour, red (255, 0, 0,
  /// 255; its first c channels).
  static void image_to_bytes(const float* image, std::size_t pixels, std::size_t c, std::uint8_t* out) {
    float lo = 0, hi = 0;
    bool any = false;
    for (std::size_t i = 0; i < pixels * c; ++i)
      if (std::isfinite(image[i])) {
        lo = any ? std::min(lo, image[i]) : image[i];
        hi = any ? std::max(hi, image[i]) : image[i];
        any = true;
      }
    const float kZero = 1e-6f;
    float scale = 0, offset = 0;
    if (lo < 0) {
      const float m = std::max(std::abs(lo), std::abs(hi));
      scale = m < kZero ? 0.0f : 127.0f / m;
      offset = 128.0f;
    } else {
      scale = hi < kZero ? 0.0f : 255.0f / hi;
    }
    static constexpr std::uint8_t kBad[4] = {255, 0, 0, 255};
    for (std::size_t p = 0; p < pixels; ++p) {
      const float* px = image + p * c;
      bool finite = true;
      for (std::size_t k = 0; k < c; ++k) finite = finite && std::isfinite(px[k]);
      for (std::size_t k = 0; k < c; ++k)
        out[p * c + k] = finite ? std::uint8_t(std::clamp(px[k] * scale + offset, 0.0f, 255.0f)) : kBad[k];
    }
  }

  /// Writes pending events to the file.
  void flush() {
    writer_->flush();
    last_flush_ = opt_.clock();
  }
  /// Flushes and closes; the writer cannot be used afterwards.
  void close() { writer_->close(); }

 private:
  void maybe_flush() {
    if (writer_->pending() >= opt_.max_queue || opt_.clock() - last_flush_ >= opt_.flush_secs) flush();
  }
  EventWriterOptions opt_;
  std::optional<RecordWriter> writer_;
  double last_flush_ = 0;
};

}  // namespace cifarnet::io
