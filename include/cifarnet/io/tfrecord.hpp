// cifarnet/io/tfrecord.hpp — TFRecord framing, shared by TFRecord data files
// and TensorBoard event files.
//
// Each record: uint64 length (little-endian), uint32 masked CRC-32C of those
// 8 bytes, the data, uint32 masked CRC-32C of the data (mask as in
// core/crc32c.hpp). The writer appends to a file it creates (never
// overwriting one), buffering records until flush(); the reader checks both
// CRCs and throws DataError naming the file and the record's byte offset.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cifarnet/core/crc32c.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/io/file.hpp"

namespace cifarnet::io {

/// Appends one framed record to `out`.
inline void frame_record(std::string& out, std::string_view data) {
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(std::uint64_t(data.size()) >> (8 * i));
  const std::uint32_t len_crc = masked_crc32c(len, 8);
  const std::uint32_t data_crc = masked_crc32c(data.data(), data.size());
  out.append(len, 8);
  for (int i = 0; i < 4; ++i) out += static_cast<char>(len_crc >> (8 * i));
  out.append(data.data(), data.size());
  for (int i = 0; i < 4; ++i) out += static_cast<char>(data_crc >> (8 * i));
}

/// Writes records to a new file. Records are buffered; flush() hands them to
/// the OS, sync() also fsyncs. The destructor flushes (errors there are
/// swallowed: call close() to see them).
class RecordWriter {
 public:
  /// Creates `path`; IoError when it exists or cannot be created.
  explicit RecordWriter(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
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
  }
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
  std::size_t pending() const { return pending_; }
  std::uint64_t bytes_written() const { return written_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::string buf_;
  std::size_t pending_ = 0;
  std::uint64_t written_ = 0;
};

/// One record and where it starts in its file.
struct Record {
  std::uint64_t offset = 0;  ///< of the record's length field
  std::string_view data;     ///< view into the reader's buffer
};

/// Reads the records of a file (held in memory), checking both CRCs.
class RecordReader {
 public:
  /// Reads `path` whole (IoError if it cannot).
  explicit RecordReader(const std::string& path) : file_(path) {
    const auto b = read_file(path);
    bytes_.assign(b.begin(), b.end());
  }
  /// Records from memory; `name` is used in messages.
  RecordReader(std::string bytes, std::string name) : file_(std::move(name)), bytes_(std::move(bytes)) {}

  /// The next record, or nullopt at the end of the file. DataError on a
  /// truncated record or a CRC mismatch.
  std::optional<Record> next() {
    using cifarnet::detail::at_file;
    using cifarnet::detail::concat;
    if (pos_ == bytes_.size()) return std::nullopt;
    const std::uint64_t at = pos_;
    const std::size_t left = bytes_.size() - pos_;
    if (left < 12)
      throw DataError(
          at_file(file_, at, concat("truncated record: ", left, " bytes left, a record header needs 12")));
    const char* p = bytes_.data() + pos_;
    std::uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<std::uint8_t>(p[i]);
    if (load32(p + 8) != masked_crc32c(p, 8))
      throw DataError(
          at_file(file_, at, concat("record length CRC mismatch (the length field reads ", len, ")")));
    if (len > left - 12 || left - 12 - len < 4)
      throw DataError(at_file(file_, at,
                              concat("truncated record: length ", len, " but only ", left - 12,
                                     " bytes follow the header (need ", len, " + 4)")));
    const std::string_view data(p + 12, static_cast<std::size_t>(len));
    if (load32(p + 12 + len) != masked_crc32c(data.data(), data.size()))
      throw DataError(at_file(file_, at, concat("record data CRC mismatch (", len, "-byte record)")));
    pos_ += 16 + static_cast<std::size_t>(len);
    return Record{at, data};
  }

  const std::string& file() const { return file_; }

 private:
  static std::uint32_t load32(const char* p) {
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
    return v;
  }
  std::string file_;
  std::string bytes_;
  std::size_t pos_ = 0;
};

}  // namespace cifarnet::io
