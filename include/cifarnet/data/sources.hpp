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
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
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
/// and their framing and CRCs checked at construction; each Example is
/// parsed when decoded.
class TfRecordSource {
 public:
  explicit TfRecordSource(const std::vector<std::string>& paths, std::size_t num_classes = 10,
                          const ImageGeometry& geometry = kCifarGeometry)
      : geometry_(geometry), num_classes_(num_classes) {
    for (const auto& p : paths) {
      files_.push_back({p, io::read_file(p)});
      for (const auto& s : index_tfrecords(files_.back().bytes, p))
        records_.push_back({files_.size() - 1, s});
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

}  // namespace data
}  // namespace cifarnet
