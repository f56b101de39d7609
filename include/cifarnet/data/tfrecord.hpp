// cifarnet/data/tfrecord.hpp — CIFAR examples in TFRecord files, the way
// the seed's generate_cifar10_tfrecords.py stores them (one tf.train.Example
// per image, 'image' = the 3,072 raw CHW bytes, 'label' = int64).
//
// The framing itself (reader, writer, index, CRC checks, errors naming the
// file and the byte offset) is io/tfrecord.hpp's; this header gives it the
// data area's names. TfRecordWriter replaces an existing file, as
// tf.io.TFRecordWriter does, and hands records to the OS every 1 MiB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/data/example.hpp"
#include "cifarnet/data/image.hpp"
#include "cifarnet/io/file.hpp"
#include "cifarnet/io/tfrecord.hpp"

namespace cifarnet {
namespace data {

using io::index_tfrecords;
using io::read_tfrecord_file;
using io::RecordSpan;
/// Streams the records of a TFRecord file (io::RecordReader).
using TfRecordReader = io::RecordReader;

/// Bytes of framing around each record: 8 (length) + 4 + 4 (CRCs).
inline constexpr std::size_t kTfRecordOverhead = io::kRecordOverhead;

/// Writes a TFRecord file, replacing any file of that name. Records reach
/// the file in write() order; close() (or the destructor, which swallows
/// errors) finishes it.
class TfRecordWriter : public io::RecordWriter {
 public:
  explicit TfRecordWriter(const std::string& path)
      : io::RecordWriter(path, Options{true, std::size_t(1) << 20}) {}
};

/// Writes an image set as the seed does: one Example per image, in order.
inline void write_cifar_tfrecords(const ImageSet& set, const std::string& path) {
  TfRecordWriter w(path);
  for (std::size_t i = 0; i < set.size(); ++i)
    w.write(encode_cifar_example(set.image(i), set.geometry.size(), set.labels[i]));
  w.close();
}

/// Checks a decoded CIFAR example against the expected geometry and label
/// range; `where` is the offset of the record's payload in `path`.
inline void check_cifar_example(const CifarExampleView& v, const ImageGeometry& g, std::size_t num_classes,
                                const std::string& path, std::uint64_t where) {
  if (v.image_size != g.size())
    throw DataError(cifarnet::detail::at_file(
        path, where,
        cifarnet::detail::concat("feature 'image' has ", v.image_size, " bytes, expected ", g.size(), " (",
                                 g.str(), ")")));
  if (v.label < 0 || static_cast<std::uint64_t>(v.label) >= num_classes)
    throw DataError(cifarnet::detail::at_file(
        path, where, cifarnet::detail::concat("label ", v.label, " out of range [0, ", num_classes, ")")));
}

/// The DataError for a CIFAR TFRecord file that holds no records (a file
/// of 0 bytes: any other byte starts a record or is a framing error).
inline void require_cifar_records(const std::vector<RecordSpan>& spans, const std::string& path) {
  if (spans.empty()) throw DataError("no examples in '" + path + "': the file is empty (0 bytes)");
}

/// Reads CIFAR examples from TFRecord files (in order) into an ImageSet; a
/// file without examples is a DataError naming it.
inline ImageSet read_cifar_tfrecords(const std::vector<std::string>& paths, std::size_t num_classes = 10,
                                     const ImageGeometry& g = ImageGeometry{32, 32, 3}) {
  ImageSet set;
  set.geometry = g;
  set.num_classes = num_classes;
  for (const auto& path : paths) {
    const auto bytes = io::read_file(path);
    const auto spans = index_tfrecords(bytes, path);
    require_cifar_records(spans, path);
    set.pixels.reserve(set.pixels.size() + spans.size() * g.size());
    for (const auto& s : spans) {
      const auto v =
          decode_cifar_example(bytes.data() + s.data, static_cast<std::size_t>(s.size), path, s.data);
      check_cifar_example(v, g, num_classes, path, s.data);
      set.pixels.insert(set.pixels.end(), v.image, v.image + v.image_size);
      set.labels.push_back(static_cast<std::int32_t>(v.label));
    }
  }
  return set;
}

}  // namespace data
}  // namespace cifarnet
