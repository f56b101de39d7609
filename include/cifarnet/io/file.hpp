// cifarnet/io/file.hpp — whole-file reads and crash-safe (atomic) writes,
// for every reader and writer of the library (io/ and data/).
//
// Read errors are IoErrors naming the file and the system's reason
// ("cannot open 'x': No such file or directory"), and for a failed read the
// byte offset it stopped at.
// AtomicFileWriter writes to a temporary file in the target's directory,
// fsyncs it, renames it over the target and fsyncs the directory, so at any
// instant the target is either the complete old file or the complete new one.
// On any error the temporary file is removed, the target is untouched, and an
// IoError names the target, the temporary file and the system's reason
// (e.g. "File too large", "No space left on device"). POSIX only.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cifarnet/core/error.hpp"

namespace cifarnet::io {

namespace detail {
inline std::string errno_text(int err) { return std::strerror(err); }

/// Directory part of a path ("." when it has none).
inline std::string dir_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}
/// File-name part of a path.
inline std::string base_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// fsync a directory so a rename inside it is durable.
inline void fsync_directory(const std::string& dir, const std::string& for_file) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw IoError(cifarnet::detail::concat("cannot open directory '", dir, "' to sync '", for_file,
                                           "': ", errno_text(err)));
  }
  int rc;
  do rc = ::fsync(fd);
  while (rc != 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot sync directories (EINVAL); the rename is then as
  // durable as that file system makes it.
  if (rc != 0 && err != EINVAL && err != EROFS)
    throw IoError(cifarnet::detail::concat("cannot sync directory '", dir, "' after writing '", for_file,
                                           "': ", errno_text(err)));
}

/// Opens `path` read-only; IoError "cannot open '<path>': <reason>".
inline int open_readonly(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw IoError(cifarnet::detail::concat("cannot open '", path, "': ", errno_text(err)));
  }
  return fd;
}
/// Reads up to `n` bytes from `fd` at its position, retrying short reads
/// and EINTR, until `n` or the end of the file; returns how many it read.
/// `offset` (the file position) only serves the message of the IoError.
inline std::size_t read_upto(int fd, void* dst, std::size_t n, const std::string& path,
                             std::uint64_t offset) {
  auto* p = static_cast<char*>(dst);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw IoError(cifarnet::detail::concat("cannot read '", path, "' at byte offset ", offset + got, ": ",
                                             errno_text(err)));
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}
/// Closes `fd` when it goes out of scope.
struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};
}  // namespace detail

/// Reads a whole file; IoError naming it when it cannot be opened or read.
inline std::vector<std::uint8_t> read_file(const std::string& path) {
  const detail::FdCloser fd{detail::open_readonly(path)};
  std::vector<std::uint8_t> out;
  struct stat st;
  if (::fstat(fd.fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
    out.reserve(static_cast<std::size_t>(st.st_size));
  std::uint8_t buf[1 << 16];
  for (;;) {
    const std::size_t n = detail::read_upto(fd.fd, buf, sizeof buf, path, out.size());
    out.insert(out.end(), buf, buf + n);
    if (n < sizeof buf) break;
  }
  return out;
}

/// Writes a file atomically: temporary file in the same directory, fsync,
/// rename over the target, fsync of the directory. Destroying an uncommitted
/// writer removes the temporary file and leaves the target as it was.
class AtomicFileWriter {
 public:
  /// Opens the temporary file. `durable` = false skips the fsyncs (tests,
  /// scratch files); the rename stays atomic either way.
  explicit AtomicFileWriter(std::string path, bool durable = true)
      : path_(std::move(path)), durable_(durable) {
    static std::atomic<unsigned> counter{0};
    tmp_ = detail::dir_of(path_) + "/." + detail::base_of(path_) + ".tmp-" + std::to_string(::getpid()) +
           "-" + std::to_string(counter++);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      const int err = errno;
      throw IoError(cifarnet::detail::concat("cannot write '", path_, "': cannot create temporary file '",
                                             tmp_, "': ", detail::errno_text(err)));
    }
  }
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter() { abandon(); }

  /// Appends bytes; on failure removes the temporary file and throws IoError.
  void write(const void* data, std::size_t n) {
    if (fd_ < 0) throw IoError("cannot write '" + path_ + "': writer already committed or failed");
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const std::size_t chunk = n < (std::size_t(1) << 30) ? n : (std::size_t(1) << 30);
      const ssize_t w = ::write(fd_, p, chunk);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail("write failed after " + std::to_string(written_) + " bytes", errno);
      }
      p += w;
      n -= static_cast<std::size_t>(w);
      written_ += static_cast<std::uint64_t>(w);
    }
  }
  void write(const std::string& s) { write(s.data(), s.size()); }

  /// fsync, close, rename over the target, fsync the directory.
  void commit() {
    if (fd_ < 0) throw IoError("cannot write '" + path_ + "': writer already committed or failed");
    if (durable_) {
      int rc;
      do rc = ::fsync(fd_);
      while (rc != 0 && errno == EINTR);
      if (rc != 0) fail("fsync failed", errno);
    }
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      const int err = errno;
      ::unlink(tmp_.c_str());
      tmp_removed_ = true;
      throw IoError(cifarnet::detail::concat("cannot write '", path_, "': closing temporary file '", tmp_,
                                             "' failed: ", detail::errno_text(err)));
    }
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp_.c_str());
      tmp_removed_ = true;
      throw IoError(cifarnet::detail::concat("cannot write '", path_, "': rename from '", tmp_,
                                             "' failed: ", detail::errno_text(err)));
    }
    committed_ = true;
    if (durable_) detail::fsync_directory(detail::dir_of(path_), path_);
  }

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }
  std::uint64_t bytes_written() const { return written_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err) {
    abandon();
    throw IoError(cifarnet::detail::concat("cannot write '", path_, "' (temporary file '", tmp_, "'): ", what,
                                           ": ", detail::errno_text(err)));
  }
  void abandon() noexcept {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    if (!committed_ && !tmp_removed_) {
      ::unlink(tmp_.c_str());
      tmp_removed_ = true;
    }
  }

  std::string path_, tmp_;
  bool durable_ = true;
  int fd_ = -1;
  bool committed_ = false;
  bool tmp_removed_ = false;
  std::uint64_t written_ = 0;
};

/// Writes `n` bytes to `path` atomically (see AtomicFileWriter).
inline void write_file_atomic(const std::string& path, const void* data, std::size_t n, bool durable = true) {
  AtomicFileWriter w(path, durable);
  w.write(data, n);
  w.commit();
}

}  // namespace cifarnet::io
