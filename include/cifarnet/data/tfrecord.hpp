// cifarnet/data/tfrecord.hpp — TFRecord files: the framing, and CIFAR
// examples stored in them the way the seed's generate_cifar10_tfrecords.py
// does (one tf.train.Example per image, 'image' = the 3,072 raw CHW bytes,
// 'label' = int64).
//
// Framing of every record (little-endian):
//   uint64 length | uint32 masked_crc32c(length bytes) | data[length] |
//   uint32 masked_crc32c(data)
// Both CRCs are verified on read. A truncated header or payload, a CRC
// mismatch, or a length running past the end of the file is a DataError
// naming the file and the byte offset of the record (or of its payload).
// Uncompressed files only (TFRecordOptions compression = none, as the seed).
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/crc32c.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/data/example.hpp"
#include "cifarnet/data/file.hpp"
#include "cifarnet/data/image.hpp"

namespace cifarnet {
namespace data {

namespace detail {
inline void put_le64(std::uint8_t* p, std::uint64_t v) {
  for (int k = 0; k < 8; ++k) p[k] = static_cast<std::uint8_t>(v >> (8 * k));
}
inline void put_le32(std::uint8_t* p, std::uint32_t v) {
  for (int k = 0; k < 4; ++k) p[k] = static_cast<std::uint8_t>(v >> (8 * k));
}
inline std::uint64_t get_le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}
inline std::uint32_t get_le32(const std::uint8_t* p) {
  return std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 |
         std::uint32_t(p[3]) << 24;
}
}  // namespace detail

/// Bytes of framing around each record: 8 (length) + 4 + 4 (CRCs).
inline constexpr std::size_t kTfRecordOverhead = 16;

/// Writes a TFRecord file. Records reach the file in write() order; close()
/// (or the destructor, which swallows errors) finishes it.
class TfRecordWriter {
 public:
  explicit TfRecordWriter(const std::string& path) : file_(path) {}

  /// Appends one record.
  void write(const void* data, std::size_t n) {
    std::uint8_t header[12];
    detail::put_le64(header, n);
    detail::put_le32(header + 8, masked_crc32c(header, 8));
    std::uint8_t footer[4];
    detail::put_le32(footer, masked_crc32c(data, n));
    file_.write(header, sizeof header);
    file_.write(data, n);
    file_.write(footer, sizeof footer);
    ++records_;
  }
  void write(const std::string& record) { write(record.data(), record.size()); }

  /// Flushes and closes the file (IoError if that fails).
  void close() { file_.close(); }
  std::uint64_t records() const { return records_; }
  const std::string& path() const { return file_.path(); }

 private:
  detail::OutputFile file_;
  std::uint64_t records_ = 0;
};

/// Where one record lies inside a TFRecord file.
struct RecordSpan {
  std::uint64_t offset = 0;  ///< of the record's length field
  std::uint64_t data = 0;    ///< of the payload
  std::uint64_t size = 0;    ///< payload bytes
};

/// Checks the framing of a whole TFRecord file held in `bytes` and returns
/// the position of every record. `verify_data_crc = false` skips the payload
/// CRC (the length CRC is always checked).
inline std::vector<RecordSpan> index_tfrecords(const std::vector<std::uint8_t>& bytes,
                                               const std::string& path, bool verify_data_crc = true) {
  std::vector<RecordSpan> spans;
  std::uint64_t off = 0;
  const std::uint64_t end = bytes.size();
  while (off < end) {
    const std::uint8_t* h = bytes.data() + off;
    if (end - off < 12)
      throw DataError(cifarnet::detail::at_file(
          path, off, cifarnet::detail::concat("truncated record header (", end - off, " of 12 bytes)")));
    const std::uint64_t len = detail::get_le64(h);
    if (detail::get_le32(h + 8) != masked_crc32c(h, 8))
      throw DataError(cifarnet::detail::at_file(path, off, "corrupt record length (CRC mismatch)"));
    const std::uint64_t avail = end - off - 12;
    if (avail < 4 || len > avail - 4)
      throw DataError(cifarnet::detail::at_file(
          path, off,
          cifarnet::detail::concat("truncated record: payload of ", len, " bytes + 4-byte CRC, but only ",
                                   avail, " bytes remain")));
    const std::uint8_t* d = h + 12;
    if (verify_data_crc && detail::get_le32(d + len) != masked_crc32c(d, static_cast<std::size_t>(len)))
      throw DataError(cifarnet::detail::at_file(
          path, off + 12,
          cifarnet::detail::concat("corrupt record payload of ", len, " bytes (CRC mismatch)")));
    spans.push_back({off, off + 12, len});
    off += 12 + len + 4;
  }
  return spans;
}

/// Reads a TFRecord file one record at a time without holding it all in
/// memory; verifies both CRCs.
class TfRecordReader {
 public:
  explicit TfRecordReader(std::string path)
      : path_(std::move(path)), f_(detail::open_for_reading(path_, size_)) {}
  TfRecordReader(const TfRecordReader&) = delete;
  TfRecordReader& operator=(const TfRecordReader&) = delete;
  ~TfRecordReader() {
    if (f_) std::fclose(f_);
  }

  /// Reads the next record into `record`; false at the end of the file.
  bool next(std::string& record) {
    std::uint8_t h[12];
    const std::size_t got = std::fread(h, 1, 12, f_);
    if (got == 0 && std::feof(f_)) return false;
    check_read();
    if (got < 12)
      throw DataError(cifarnet::detail::at_file(
          path_, off_, cifarnet::detail::concat("truncated record header (", got, " of 12 bytes)")));
    const std::uint64_t len = detail::get_le64(h);
    if (detail::get_le32(h + 8) != masked_crc32c(h, 8))
      throw DataError(cifarnet::detail::at_file(path_, off_, "corrupt record length (CRC mismatch)"));
    const std::uint64_t avail = size_ > off_ + 12 ? size_ - off_ - 12 : 0;
    if (avail < 4 || len > avail - 4)
      throw DataError(cifarnet::detail::at_file(
          path_, off_,
          cifarnet::detail::concat("truncated record: payload of ", len, " bytes + 4-byte CRC, but only ",
                                   avail, " bytes remain")));
    record.resize(static_cast<std::size_t>(len));
    std::uint8_t crc[4];
    if (std::fread(&record[0], 1, record.size(), f_) != record.size() || std::fread(crc, 1, 4, f_) != 4) {
      check_read();
      throw DataError(cifarnet::detail::at_file(path_, off_, "truncated record (file shrank while reading)"));
    }
    if (detail::get_le32(crc) != masked_crc32c(record.data(), record.size()))
      throw DataError(cifarnet::detail::at_file(
          path_, off_ + 12,
          cifarnet::detail::concat("corrupt record payload of ", len, " bytes (CRC mismatch)")));
    record_offset_ = off_;
    off_ += 12 + len + 4;
    return true;
  }

  /// Byte offset of the next record (= bytes consumed so far).
  std::uint64_t offset() const { return off_; }
  /// Byte offset of the record last returned by next().
  std::uint64_t record_offset() const { return record_offset_; }
  const std::string& path() const { return path_; }

 private:
  void check_read() {
    if (std::ferror(f_))
      throw IoError(cifarnet::detail::at_file(path_, off_, "read failed (" + detail::os_reason() + ")"));
  }
  std::string path_;
  std::uint64_t size_ = 0;
  std::FILE* f_ = nullptr;
  std::uint64_t off_ = 0, record_offset_ = 0;
};

/// Reads every record of a TFRecord file.
inline std::vector<std::string> read_tfrecord_file(const std::string& path) {
  TfRecordReader r(path);
  std::vector<std::string> out;
  std::string rec;
  while (r.next(rec)) out.push_back(rec);
  return out;
}

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

/// Reads CIFAR examples from TFRecord files (in order) into an ImageSet.
inline ImageSet read_cifar_tfrecords(const std::vector<std::string>& paths, std::size_t num_classes = 10,
                                     const ImageGeometry& g = ImageGeometry{32, 32, 3}) {
  ImageSet set;
  set.geometry = g;
  set.num_classes = num_classes;
  for (const auto& path : paths) {
    const auto bytes = detail::read_file(path);
    const auto spans = index_tfrecords(bytes, path);
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
