// cifarnet/data/file.hpp — whole-file reads and a checked binary writer for
// the data area's readers and writers.
//
// Every failure is an IoError naming the file (and, for reads, the byte
// offset where reading stopped) with the operating system's reason.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"

namespace cifarnet {
namespace data {
namespace detail {

inline std::string os_reason() { return errno != 0 ? std::string(std::strerror(errno)) : "unknown error"; }

/// Opens a file for binary reading and reports its size (0 if unknown).
/// IoError naming the file when it cannot be opened.
inline std::FILE* open_for_reading(const std::string& path, std::uint64_t& size) {
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw IoError(cifarnet::detail::at_file(path, 0, "cannot open for reading (" + os_reason() + ")"));
  size = 0;
  if (std::fseek(f, 0, SEEK_END) == 0) {
    const long s = std::ftell(f);
    if (s > 0) size = static_cast<std::uint64_t>(s);
  }
  std::rewind(f);
  return f;
}

/// Reads a whole file into memory. IoError when it cannot be opened or read.
inline std::vector<std::uint8_t> read_file(const std::string& path) {
  std::uint64_t size = 0;
  std::FILE* f = open_for_reading(path, size);
  std::vector<std::uint8_t> out;
  out.reserve(static_cast<std::size_t>(size));
  std::uint8_t buf[1 << 16];
  for (;;) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f);
    out.insert(out.end(), buf, buf + n);
    if (n < sizeof buf) {
      if (std::ferror(f)) {
        const std::string why = os_reason();
        std::fclose(f);
        throw IoError(cifarnet::detail::at_file(path, out.size(), "read failed (" + why + ")"));
      }
      break;
    }
  }
  std::fclose(f);
  return out;
}

/// A binary output file; write() and close() throw IoError on failure.
class OutputFile {
 public:
  explicit OutputFile(std::string path) : path_(std::move(path)) {
    errno = 0;
    f_ = std::fopen(path_.c_str(), "wb");
    if (!f_)
      throw IoError(cifarnet::detail::at_file(path_, 0, "cannot open for writing (" + os_reason() + ")"));
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile() {
    if (f_) std::fclose(f_);
  }

  void write(const void* p, std::size_t n) {
    if (!f_) throw IoError(cifarnet::detail::at_file(path_, written_, "write after close"));
    if (n != 0 && std::fwrite(p, 1, n, f_) != n)
      throw IoError(cifarnet::detail::at_file(path_, written_, "write failed (" + os_reason() + ")"));
    written_ += n;
  }
  /// Flushes and closes; throws if the data did not reach the file.
  void close() {
    if (!f_) return;
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0)
      throw IoError(cifarnet::detail::at_file(path_, written_, "close failed (" + os_reason() + ")"));
  }
  std::uint64_t bytes_written() const { return written_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  std::uint64_t written_ = 0;
};

}  // namespace detail
}  // namespace data
}  // namespace cifarnet
