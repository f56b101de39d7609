// cifarnet/data/sources.hpp — where a Pipeline gets its examples from.
//
// A source is a class with
//   std::size_t size() const;              // examples per epoch, counted from the files
//   ImageGeometry geometry() const;        // of the decoded images
//   std::size_t num_classes() const;
//   std::int32_t decode(std::size_t i, float* hwc) const;  // image i -> float HWC 0..255, returns its label
// decode() must be safe to call from several threads at once (it only
// reads). Sources load their files when constructed, so a bad file fails
// there, not in a worker thread; TfRecordSource defers parsing each
// tf.train.Example to decode() (the workers), as TensorFlow's parallel map
// does, and reports a bad Example from there with its file and offset.
// Cifar10Source opens a directory in either form (binary or TFRecord),
// detecting which it holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "cifarnet/data/cifar.hpp"
#include "cifarnet/data/example.hpp"
#include "cifarnet/data/image.hpp"
#include "cifarnet/data/tfrecord.hpp"

namespace cifarnet {
namespace data {

/// A source over an ImageSet held in memory (uint8 CHW).
class ImageSetSource {
 public:
  explicit ImageSetSource(ImageSet set) : set_(std::move(set)) {
    if (set_.pixels.size() != set_.labels.size() * set_.geometry.size())
      throw DataError(cifarnet::detail::concat("ImageSet holds ", set_.pixels.size(), " pixel bytes for ",
                                               set_.labels.size(), " labels of geometry ",
                                               set_.geometry.str()));
    for (std::size_t i = 0; i < set_.labels.size(); ++i)
      if (set_.labels[i] < 0 ||
          (set_.num_classes && static_cast<std::size_t>(set_.labels[i]) >= set_.num_classes))
        throw DataError(cifarnet::detail::concat("ImageSet label ", set_.labels[i], " of image ", i,
                                                 " out of range [0, ", set_.num_classes, ")"));
  }
  std::size_t size() const { return set_.size(); }
  ImageGeometry geometry() const { return set_.geometry; }
  std::size_t num_classes() const { return set_.num_classes; }
  std::int32_t decode(std::size_t i, float* hwc) const {
    decode_chw_to_hwc(set_.image(i), set_.geometry, hwc);
    return set_.labels[i];
  }
  const ImageSet& images() const { return set_; }

 private:
  ImageSet set_;
};

/// CIFAR-10 binary files of one split (see cifar.hpp), held in memory.
class Cifar10Binary : public ImageSetSource {
 public:
  /// `dir` is the cifar-10-batches-bin directory.
  Cifar10Binary(const std::string& dir, Split split) : ImageSetSource(read_cifar10(dir, split)) {}
};

/// CIFAR-100 binary files of one split; fine labels (100 classes) unless
/// `coarse` (20 super-classes).
class Cifar100Binary : public ImageSetSource {
 public:
  Cifar100Binary(const std::string& dir, Split split, bool coarse = false)
      : ImageSetSource(load(dir, split, coarse)) {}

 private:
  static ImageSet load(const std::string& dir, Split split, bool coarse) {
    ImageSet s = read_cifar100(dir, split);
    if (coarse) {
      s.labels.swap(s.coarse_labels);
      s.class_names.swap(s.coarse_class_names);
      s.num_classes = 20;
    }
    return s;
  }
};

/// CIFAR examples in TFRecord files (the seed's format). The files are read
/// and their framing and CRCs checked at construction (a file without
/// examples is a DataError naming it); each Example is parsed when decoded.
class TfRecordSource {
 public:
  explicit TfRecordSource(const std::vector<std::string>& paths, std::size_t num_classes = 10,
                          const ImageGeometry& geometry = kCifarGeometry)
      : geometry_(geometry), num_classes_(num_classes) {
    for (const auto& p : paths) {
      files_.push_back({p, io::read_file(p)});
      const auto spans = index_tfrecords(files_.back().bytes, p);
      require_cifar_records(spans, p);
      for (const auto& s : spans) records_.push_back({files_.size() - 1, s});
    }
  }
  /// `<dir>/<split>.tfrecords` as the seed's generator names them;
  /// train_all reads train.tfrecords and validation.tfrecords.
  TfRecordSource(const std::string& dir, Split split) : TfRecordSource(split_files(dir, split)) {}

  static std::vector<std::string> split_files(const std::string& dir, Split split) {
    if (split == Split::train_all)
      return {detail::join_path(dir, "train.tfrecords"), detail::join_path(dir, "validation.tfrecords")};
    return {detail::join_path(dir, std::string(to_string(split)) + ".tfrecords")};
  }

  std::size_t size() const { return records_.size(); }
  ImageGeometry geometry() const { return geometry_; }
  std::size_t num_classes() const { return num_classes_; }
  std::int32_t decode(std::size_t i, float* hwc) const {
    const Record& r = records_[i];
    const File& f = files_[r.file];
    const auto v = decode_cifar_example(f.bytes.data() + r.span.data, static_cast<std::size_t>(r.span.size),
                                        f.path, r.span.data);
    check_cifar_example(v, geometry_, num_classes_, f.path, r.span.data);
    decode_chw_to_hwc(v.image, geometry_, hwc);
    return static_cast<std::int32_t>(v.label);
  }

 private:
  struct File {
    std::string path;
    std::vector<std::uint8_t> bytes;
  };
  struct Record {
    std::size_t file;
    RecordSpan span;
  };
  ImageGeometry geometry_;
  std::size_t num_classes_;
  std::vector<File> files_;
  std::vector<Record> records_;
};

/// A DataError unless `examples` fill one batch of `batch_size`, for a use
/// that counts whole batches of a set (a run sized in epochs, the last
/// partial batch dropped, makes no step from a smaller one): "too few
/// examples in <what>: N, fewer than the batch size B (<why>)". `what`
/// names the files (Cifar10Source::description()).
inline void require_one_batch(std::size_t examples, std::size_t batch_size, const std::string& what,
                              const std::string& why) {
  if (examples < batch_size)
    throw DataError(cifarnet::detail::concat("too few examples in ", what, ": ", examples,
                                             ", fewer than the batch size ", batch_size, " (", why, ")"));
}

/// The two forms of CIFAR-10 a data directory may hold.
enum class Cifar10Format {
  automatic,  ///< detect_cifar10_format() decides
  binary,     ///< data_batch_1..5.bin and test_batch.bin (cifar.hpp)
  tfrecords,  ///< train/validation/eval.tfrecords, as the seed's generate_cifar10_tfrecords.py writes
};

inline const char* to_string(Cifar10Format f) {
  return f == Cifar10Format::binary ? "binary" : f == Cifar10Format::tfrecords ? "tfrecords" : "auto";
}

/// Parses "auto", "binary" and "tfrecords".
inline Cifar10Format parse_cifar10_format(const std::string& s) {
  if (s == "auto") return Cifar10Format::automatic;
  if (s == "binary") return Cifar10Format::binary;
  if (s == "tfrecords") return Cifar10Format::tfrecords;
  throw ConfigError("unknown CIFAR-10 input format '" + s + "' (expected auto, binary or tfrecords)");
}

/// The files that make a directory a TFRecord CIFAR-10 set.
inline std::vector<std::string> cifar10_tfrecord_names() {
  return {"train.tfrecords", "validation.tfrecords", "eval.tfrecords"};
}

/// Which form `dir` holds: TFRecords when all three .tfrecords files are
/// there (even next to binary files), binary when any binary batch file is
/// in `dir` or in its cifar-10-batches-bin/ (see cifar10_binary_dir). An
/// IoError says what was looked for when neither is, and which .tfrecords
/// files are missing when only some are.
inline Cifar10Format detect_cifar10_format(const std::string& dir) {
  std::string have, missing;
  for (const auto& name : cifar10_tfrecord_names()) {
    std::error_code ec;
    std::string& list = std::filesystem::is_regular_file(detail::join_path(dir, name), ec) ? have : missing;
    list += (list.empty() ? "" : ", ") + name;
  }
  if (missing.empty()) return Cifar10Format::tfrecords;
  const std::string bin = cifar10_binary_dir(dir);
  std::vector<std::string> bin_files = cifar10_files(Split::train_all);
  bin_files.push_back(cifar10_files(Split::eval).front());
  for (const auto& f : bin_files) {
    std::error_code ec;
    if (std::filesystem::exists(detail::join_path(bin, f), ec)) return Cifar10Format::binary;
  }
  if (!have.empty())
    throw IoError("directory '" + dir + "' holds " + have + " but not " + missing +
                  ": the TFRecord form of CIFAR-10 needs train.tfrecords, validation.tfrecords and "
                  "eval.tfrecords (cifar10_to_tfrecords writes all three)");
  throw IoError("no CIFAR-10 data in '" + dir + "': expected the binary files (" +
                detail::join_path(dir, "data_batch_1.bin") +
                " ... data_batch_5.bin and test_batch.bin, there or in its " + kCifar10BinDir +
                "/) or the TFRecord files (train.tfrecords, validation.tfrecords, eval.tfrecords)");
}

/// One split of CIFAR-10 from a directory in either form: the binary files
/// (held in memory as an ImageSetSource) or the seed's TFRecord files (a
/// TfRecordSource: each tf.train.Example parsed as it is decoded, 'image'
/// bytes + 'label' int64). Both give the same examples in the same order, so
/// a Pipeline with the same options yields the same batches from either.
/// An in-memory ImageSet (e.g. the synthetic set) can stand in for both.
class Cifar10Source {
 public:
  Cifar10Source(const std::string& dir, Split split, Cifar10Format format = Cifar10Format::automatic)
      : Cifar10Source(
            open(dir, split, format == Cifar10Format::automatic ? detect_cifar10_format(dir) : format)) {}
  explicit Cifar10Source(ImageSet set) : src_(ImageSetSource(std::move(set))), description_("in memory") {}

  std::size_t size() const {
    return std::visit([](const auto& s) { return s.size(); }, src_);
  }
  ImageGeometry geometry() const {
    return std::visit([](const auto& s) { return s.geometry(); }, src_);
  }
  std::size_t num_classes() const {
    return std::visit([](const auto& s) { return s.num_classes(); }, src_);
  }
  std::int32_t decode(std::size_t i, float* hwc) const {
    return std::visit([&](const auto& s) { return s.decode(i, hwc); }, src_);
  }
  /// Whether the examples come from TFRecord files.
  bool tfrecords() const { return std::holds_alternative<TfRecordSource>(src_); }
  /// The files read ("binary files data_batch_1.bin ... in DIR",
  /// "TFRecord files DIR/train.tfrecords", or "in memory").
  const std::string& description() const { return description_; }

 private:
  using Variant = std::variant<ImageSetSource, TfRecordSource>;
  struct Opened {
    Variant src;
    std::string description;
  };
  explicit Cifar10Source(Opened o) : src_(std::move(o.src)), description_(std::move(o.description)) {}

  static Opened open(const std::string& dir, Split split, Cifar10Format format) {
    std::string files;
    if (format == Cifar10Format::tfrecords) {
      for (const auto& p : TfRecordSource::split_files(dir, split)) files += (files.empty() ? "" : ", ") + p;
      return {Variant(std::in_place_type<TfRecordSource>, dir, split), "TFRecord files " + files};
    }
    const std::string bin = cifar10_binary_dir(dir);
    for (const auto& f : cifar10_files(split)) files += (files.empty() ? "" : ", ") + f;
    return {Variant(std::in_place_type<ImageSetSource>, read_cifar10(bin, split)),
            "binary files " + files + " in " + bin};
  }

  Variant src_;
  std::string description_;
};

}  // namespace data
}  // namespace cifarnet
