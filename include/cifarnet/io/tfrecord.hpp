// cifarnet/io/tfrecord.hpp — TFRecord framing: the one writer, reader and
// validator of it, shared by TFRecord data files (data/tfrecord.hpp adds the
// CIFAR examples) and TensorBoard event files (io/tfevents.hpp).
//
// Each record (little-endian): uint64 length | uint32 masked CRC-32C of those
// 8 bytes | data[length] | uint32 masked CRC-32C of the data (mask as in
// core/crc32c.hpp). Uncompressed files only (TFRecordOptions compression =
// none, as the seed and TensorBoard write them).
//
// Reading checks both CRCs (index_tfrecords may skip the payload's). A
// truncated header or payload, a length running past the end of the file, or
// a CRC mismatch is a DataError naming the file and the byte offset of the
// record (of its payload for a payload CRC mismatch). A corrupt length is
// caught by its CRC, and a huge one by the file size, before anything is
// allocated. The writer buffers records until flush() (or until
// Options::flush_bytes are pending); I/O failures are IoErrors naming the file.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cifarnet/core/crc32c.hpp"
#include "cifarnet/core/endian.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/io/file.hpp"

namespace cifarnet::io {

/// Bytes before a record's data: the length and its CRC.
inline constexpr std::size_t kRecordHeaderBytes = 12;
/// Bytes of framing around each record: header + the data's CRC.
inline constexpr std::size_t kRecordOverhead = 16;

/// Appends one framed record to `out`.
inline void frame_record(std::string& out, std::string_view data) {
  char header[kRecordHeaderBytes];
  cifarnet::detail::put_le64(header, data.size());
  cifarnet::detail::put_le32(header + 8, masked_crc32c(header, 8));
  out.append(header, sizeof header);
  out.append(data.data(), data.size());
  cifarnet::detail::append_le(out, masked_crc32c(data.data(), data.size()));
}

namespace detail {
/// Checks the header of the record at `offset` in `file`, of which `left`
/// bytes remain from `offset` on (`h` holds min(left, 12) of them), and
/// returns the data's length. DataError when the header is cut short, its
/// CRC does not match, or the data and its CRC do not fit in what remains.
inline std::uint64_t check_record_header(const std::uint8_t* h, std::uint64_t left, const std::string& file,
                                         std::uint64_t offset) {
  using cifarnet::detail::at_file;
  using cifarnet::detail::concat;
  if (left < kRecordHeaderBytes)
    throw DataError(at_file(file, offset, concat("truncated record header (", left, " of 12 bytes)")));
  const std::uint64_t len = cifarnet::detail::get_le64(h);
  if (cifarnet::detail::get_le32(h + 8) != masked_crc32c(h, 8))
    throw DataError(
        at_file(file, offset, concat("corrupt record length (CRC mismatch), the length field reads ", len)));
  const std::uint64_t avail = left - kRecordHeaderBytes;
  if (avail < 4 || len > avail - 4)
    throw DataError(at_file(file, offset,
                            concat("truncated record: payload of ", len, " bytes + 4-byte CRC, but only ",
                                   avail, " bytes remain")));
  return len;
}
/// Checks a record's `len` data bytes, at `data_offset` in `file`, against
/// the masked CRC stored (little-endian) at `crc`.
inline void check_record_data(const void* data, std::uint64_t len, const void* crc, const std::string& file,
                              std::uint64_t data_offset) {
  if (cifarnet::detail::get_le32(crc) != masked_crc32c(data, static_cast<std::size_t>(len)))
    throw DataError(cifarnet::detail::at_file(
        file, data_offset,
        cifarnet::detail::concat("corrupt record payload of ", len, " bytes (CRC mismatch)")));
}
}  // namespace detail

/// Writes records to a file. Records are buffered; flush() hands them to
/// the OS, sync() also fsyncs. The destructor flushes (errors there are
/// swallowed: call close() to see them).
class RecordWriter {
 public:
  struct Options {
    /// Replace an existing file (as tf.io.TFRecordWriter does) instead of
    /// refusing it.
    bool replace = false;
    /// Flush whenever this many bytes are buffered; 0: only on flush(),
    /// sync(), close() and destruction.
    std::size_t flush_bytes = 0;
  };

  /// Creates `path`; IoError when it exists or cannot be created.
  explicit RecordWriter(std::string path) : RecordWriter(std::move(path), Options()) {}
  /// Creates (or with `replace`, truncates) `path`; IoError when it cannot.
  RecordWriter(std::string path, Options options) : path_(std::move(path)), opt_(options) {
    const int excl = opt_.replace ? O_TRUNC : O_EXCL;
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | excl | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      const int err = errno;
      throw IoError(cifarnet::detail::concat("cannot create '", path_, "': ", detail::errno_text(err)));
    }
  }
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;
  ~RecordWriter() {
    try {
      close();
    } catch (...) {  // NOLINT: a destructor must not throw
    }
  }

  /// Buffers one record.
  void write(std::string_view data) {
    if (fd_ < 0) throw IoError("cannot write '" + path_ + "': the record writer is closed");
    frame_record(buf_, data);
    ++pending_;
    ++records_;
    if (opt_.flush_bytes != 0 && buf_.size() >= opt_.flush_bytes) flush();
  }
  void write(const void* data, std::size_t n) { write(std::string_view(static_cast<const char*>(data), n)); }
  /// Writes the buffered records to the file.
  void flush() {
    if (fd_ < 0 || buf_.empty()) return;
    const char* p = buf_.data();
    std::size_t n = buf_.size();
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        // Keep what was not written, so a later flush can retry.
        buf_.erase(0, static_cast<std::size_t>(p - buf_.data()));
        throw IoError(cifarnet::detail::concat("cannot write '", path_, "' at byte offset ", written_, ": ",
                                               detail::errno_text(err)));
      }
      p += w;
      n -= static_cast<std::size_t>(w);
      written_ += static_cast<std::uint64_t>(w);
    }
    buf_.clear();
    pending_ = 0;
  }
  /// flush() plus fsync.
  void sync() {
    flush();
    if (fd_ >= 0 && ::fsync(fd_) != 0) {
      const int err = errno;
      if (err != EINVAL && err != EROFS)
        throw IoError(cifarnet::detail::concat("cannot sync '", path_, "': ", detail::errno_text(err)));
    }
  }
  /// Flushes and closes; further writes are errors.
  void close() {
    if (fd_ < 0) return;
    try {
      flush();
    } catch (...) {
      ::close(fd_);
      fd_ = -1;
      throw;
    }
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) {
      const int err = errno;
      throw IoError(cifarnet::detail::concat("cannot close '", path_, "': ", detail::errno_text(err)));
    }
  }

  const std::string& path() const { return path_; }
  /// Records buffered since the last flush.
  std::size_t pending() const { return pending_; }
  /// Records written, flushed or not.
  std::uint64_t records() const { return records_; }
  /// Bytes handed to the OS so far.
  std::uint64_t bytes_written() const { return written_; }

 private:
  std::string path_;
  Options opt_;
  int fd_ = -1;
  std::string buf_;
  std::size_t pending_ = 0;
  std::uint64_t records_ = 0;
  std::uint64_t written_ = 0;
};

/// One record and where it starts in its file.
struct Record {
  std::uint64_t offset = 0;  ///< of the record's length field
  std::string_view data;     ///< view into the reader's buffer, valid until its next next()
};

/// Reads the records of a regular file one at a time, without holding the
/// file in memory, checking both CRCs.
class RecordReader {
 public:
  /// Opens `path` (IoError if it cannot).
  explicit RecordReader(std::string path) : path_(std::move(path)), fd_(detail::open_readonly(path_)) {
    struct stat st;
    if (::fstat(fd_, &st) == 0 && st.st_size > 0) size_ = static_cast<std::uint64_t>(st.st_size);
  }
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;
  ~RecordReader() { ::close(fd_); }

  /// The next record, or nullopt at the end of the file.
  std::optional<Record> next() {
    if (!read(buf_)) return std::nullopt;
    return Record{record_offset_, buf_};
  }
  /// Reads the next record's data into `record`; false at the end of the file.
  bool next(std::string& record) { return read(record); }

  /// Byte offset of the next record (= bytes consumed so far).
  std::uint64_t offset() const { return off_; }
  /// Byte offset of the record last returned by next().
  std::uint64_t record_offset() const { return record_offset_; }
  const std::string& path() const { return path_; }

 private:
  bool read(std::string& out) {
    std::uint8_t h[kRecordHeaderBytes];
    const std::size_t got = detail::read_upto(fd_, h, sizeof h, path_, off_);
    if (got == 0) return false;
    // What remains of the file (its size when opened; at least what was read).
    const std::uint64_t left =
        got < sizeof h ? got : std::max<std::uint64_t>(size_ > off_ ? size_ - off_ : 0, got);
    const std::uint64_t len = detail::check_record_header(h, left, path_, off_);
    out.resize(static_cast<std::size_t>(len) + 4);
    if (detail::read_upto(fd_, out.data(), out.size(), path_, off_ + kRecordHeaderBytes) != out.size())
      throw DataError(cifarnet::detail::at_file(path_, off_, "truncated record (file shrank while reading)"));
    detail::check_record_data(out.data(), len, out.data() + len, path_, off_ + kRecordHeaderBytes);
    out.resize(static_cast<std::size_t>(len));
    record_offset_ = off_;
    off_ += kRecordOverhead + len;
    return true;
  }

  std::string path_;
  int fd_;
  std::uint64_t size_ = 0;
  std::string buf_;
  std::uint64_t off_ = 0, record_offset_ = 0;
};

/// Where one record lies inside a TFRecord file.
struct RecordSpan {
  std::uint64_t offset = 0;  ///< of the record's length field
  std::uint64_t data = 0;    ///< of the payload
  std::uint64_t size = 0;    ///< payload bytes
};

/// Checks the framing of a whole TFRecord file held in `bytes` (read from
/// `path`, named in errors) and returns the position of every record.
/// `verify_data_crc = false` skips the payload CRC (the length CRC is always
/// checked).
inline std::vector<RecordSpan> index_tfrecords(const std::vector<std::uint8_t>& bytes,
                                               const std::string& path, bool verify_data_crc = true) {
  std::vector<RecordSpan> spans;
  for (std::uint64_t off = 0; off < bytes.size();) {
    const std::uint8_t* h = bytes.data() + off;
    const std::uint64_t len = detail::check_record_header(h, bytes.size() - off, path, off);
    const std::uint8_t* d = h + kRecordHeaderBytes;
    if (verify_data_crc) detail::check_record_data(d, len, d + len, path, off + kRecordHeaderBytes);
    spans.push_back({off, off + kRecordHeaderBytes, len});
    off += kRecordOverhead + len;
  }
  return spans;
}

/// Reads every record of a TFRecord file.
inline std::vector<std::string> read_tfrecord_file(const std::string& path) {
  RecordReader r(path);
  std::vector<std::string> out;
  std::string rec;
  while (r.next(rec)) out.push_back(rec);
  return out;
}

}  // namespace cifarnet::io
