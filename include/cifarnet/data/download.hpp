// cifarnet/data/download.hpp — fetch, verify and unpack the CIFAR-10
// binary tarball, as the tutorial's maybe_download_and_extract() does.
//
// Optional component: it needs libcurl (the transfer, any URL libcurl
// takes: https, http, ftp, file), libarchive (the .tar.gz) and OpenSSL's
// libcrypto (the MD5). Link cifarnet::download (Debian: libcurl4-openssl-dev,
// libarchive-dev, libssl-dev); nothing else in the library depends on them.
//
// download_cifar10(dest) leaves the set in dest/cifar-10-batches-bin/ and
// returns that directory. It does nothing when the set is already there
// (in dest itself or in dest/cifar-10-batches-bin/), and skips the transfer
// when dest already holds a tarball of the expected size and MD5. Otherwise:
//
//   1. the URL is fetched into a temporary file in dest (io::AtomicFileWriter:
//      .<name>.tmp-<pid>-<n>), its size and MD5 checked, then renamed to
//      dest/<name>;
//   2. the tarball is unpacked into a temporary directory in dest
//      (.extract-XXXXXX), entries checked (relative paths without '..';
//      regular files and directories only) and bounded: a batch file larger
//      than its 10,000 records, any other file larger than
//      DownloadOptions::other_file_bytes, more bytes in all than the set's,
//      or more entries than DownloadOptions::max_entries is refused before
//      the excess is written (a gzip bomb stops there);
//   3. the unpacked cifar-10-batches-bin/ is checked to hold the six batch
//      files and renamed into place.
//
// Any failure removes the temporary file and directory (and a tarball the
// call fetched), so nothing half-done is left in dest, and throws an IoError
// (transfer, file system) or DataError (size, checksum, archive contents)
// naming the URL or the file.
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/data/cifar.hpp"
#include "cifarnet/io/file.hpp"

namespace cifarnet {
namespace data {

/// The size of each of the CIFAR-10 tarball's six batch files
/// (data_batch_1..5.bin, test_batch.bin): 10,000 records of 3,073 bytes.
inline constexpr std::uint64_t kCifar10BatchFileBytes = 10000 * std::uint64_t(kCifar10RecordBytes);

/// What download_cifar10 fetches and what it expects.
struct DownloadOptions {
  std::string url = kCifar10Url;
  /// Expected MD5 of the tarball as 32 hex digits; empty: not checked.
  std::string md5 = kCifar10TarMd5;
  /// Expected size of the tarball in bytes; 0: not checked.
  std::uint64_t bytes = kCifar10TarBytes;
  /// The directory the tarball unpacks to (holding the batch files).
  std::string archive_dir = kCifar10BinDir;
  /// Progress and decisions, one line each (nullptr: quiet).
  std::ostream* log = nullptr;
  /// Give up on a connection that moves less than 1 KiB/s for this long.
  long stall_seconds = 60;
  /// Bounds on unpacking, so that a tarball inflating to more than the data
  /// set (a gzip bomb: gzip inflates zeros about 1000-fold, so a 4 MiB
  /// tarball can hold a 4 GiB member) is refused before it fills the disk:
  /// each of the six batch files in archive_dir/ holds at most
  /// batch_file_bytes, any other file at most other_file_bytes, all files
  /// together at most six batch files plus other_file_bytes, and the
  /// tarball at most max_entries entries. The real tarball holds the six
  /// batch files, a small batches.meta.txt and readme.html, and their
  /// directory.
  std::uint64_t batch_file_bytes = kCifar10BatchFileBytes;
  std::uint64_t other_file_bytes = std::uint64_t(1) << 16;
  std::uint64_t max_entries = 64;
};

/// What download_cifar10 did.
struct DownloadResult {
  std::string data_dir;     ///< the directory holding the batch files
  bool downloaded = false;  ///< the URL was fetched by this call
  bool extracted = false;   ///< the tarball was unpacked by this call
};

namespace detail {

/// MD5 through OpenSSL's EVP interface.
class Md5 {
 public:
  Md5() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_md5(), nullptr) != 1)
      throw Error("MD5: OpenSSL could not set up an MD5 digest");
  }
  void update(const void* data, std::size_t n) {
    if (EVP_DigestUpdate(ctx_.get(), data, n) != 1) throw Error("MD5: OpenSSL digest update failed");
  }
  /// The digest as 32 lower-case hex digits.
  std::string hex() {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), d, &n) != 1) throw Error("MD5: OpenSSL digest final failed");
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (unsigned int i = 0; i < n; ++i) {
      s.push_back(digits[d[i] >> 4]);
      s.push_back(digits[d[i] & 15]);
    }
    return s;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

/// Removes a path (file or directory tree) on destruction unless released.
class RemoveGuard {
 public:
  explicit RemoveGuard(std::filesystem::path p) : path_(std::move(p)) {}
  RemoveGuard(const RemoveGuard&) = delete;
  RemoveGuard& operator=(const RemoveGuard&) = delete;
  ~RemoveGuard() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  void release() { path_.clear(); }

 private:
  std::filesystem::path path_;
};

inline std::string lower(std::string s) {
  for (auto& c : s)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return s;
}

/// MD5 of a whole file.
inline std::string md5_of_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    const int err = errno;
    throw IoError("cannot open '" + path + "': " + std::strerror(err));
  }
  Md5 md5;
  std::vector<char> buf(1 << 20);
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) md5.update(buf.data(), n);
  if (std::ferror(f.get())) throw IoError("cannot read '" + path + "'");
  return md5.hex();
}

/// Where the transfer's bytes go: the file, the running MD5 and count.
struct Sink {
  io::AtomicFileWriter* out;
  Md5 md5;
  std::uint64_t bytes = 0, limit = 0;  // limit: stop past this many (0: none)
  bool too_long = false;
  std::string write_error;  // set when writing the file failed
  std::ostream* log = nullptr;
  int last_decile = -1;
};

inline std::size_t write_to_sink(char* data, std::size_t size, std::size_t count, void* user) {
  auto* s = static_cast<Sink*>(user);
  const std::size_t n = size * count;
  if (s->limit && s->bytes + n > s->limit) {
    s->too_long = true;
    return 0;  // makes libcurl stop with CURLE_WRITE_ERROR
  }
  try {  // no exception may cross libcurl's C frames
    s->out->write(data, n);
  } catch (const std::exception& e) {
    s->write_error = e.what();
    return 0;
  }
  s->md5.update(data, n);
  s->bytes += n;
  if (s->log && s->limit) {
    const int decile = int(s->bytes * 10 / s->limit);
    if (decile > s->last_decile) {
      s->last_decile = decile;
      *s->log << ">> Downloading " << decile * 10 << "%\n" << std::flush;
    }
  }
  return n;
}

/// libcurl's one-time global set-up (thread-safe through the static).
inline void curl_global() {
  static const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK) throw IoError(std::string("libcurl initialisation failed: ") + curl_easy_strerror(rc));
}

/// Fetches `o.url` into `final_path`, checking size and MD5 as `o`
/// asks; on any failure the file is removed and the error names the URL.
inline void fetch_checked(const DownloadOptions& o, const std::string& final_path) {
  curl_global();
  // A temporary file beside final_path, renamed over it by commit() once the
  // checks pass and removed on any exception (io::AtomicFileWriter).
  io::AtomicFileWriter out(final_path);
  Sink sink{&out, Md5{}, 0, o.bytes, false, {}, o.log, -1};
  std::unique_ptr<CURL, void (*)(CURL*)> c(curl_easy_init(), &curl_easy_cleanup);
  if (!c) throw IoError("libcurl could not start a transfer of " + o.url);
  char err[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c.get(), CURLOPT_URL, o.url.c_str());
  curl_easy_setopt(c.get(), CURLOPT_ERRORBUFFER, err);
  curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, &write_to_sink);
  curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c.get(), CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c.get(), CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c.get(), CURLOPT_FAILONERROR, 1L);  // an HTTP status >= 400 is an error
  curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(c.get(), CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(c.get(), CURLOPT_LOW_SPEED_TIME, o.stall_seconds);
#if LIBCURL_VERSION_NUM >= 0x075500  // 7.85: protocols by name
  curl_easy_setopt(c.get(), CURLOPT_PROTOCOLS_STR, "http,https,ftp,ftps,file");
  curl_easy_setopt(c.get(), CURLOPT_REDIR_PROTOCOLS_STR, "http,https,ftp,ftps");
#endif
  if (o.log) *o.log << ">> Downloading " << o.url << " to " << final_path << "\n" << std::flush;
  const CURLcode rc = curl_easy_perform(c.get());
  if (sink.too_long)
    throw DataError("download of " + o.url + ": more than the expected " + std::to_string(o.bytes) +
                    " bytes (not the expected file)");
  if (!sink.write_error.empty()) throw IoError("download of " + o.url + ": " + sink.write_error);
  if (rc != CURLE_OK)
    throw IoError("download of " + o.url +
                  " failed: " + (err[0] ? std::string(err) : curl_easy_strerror(rc)));
  if (o.bytes && sink.bytes != o.bytes)
    throw DataError("download of " + o.url + ": got " + std::to_string(sink.bytes) + " bytes, expected " +
                    std::to_string(o.bytes) + " (truncated, or not the expected file)");
  const std::string md5 = sink.md5.hex();
  if (!o.md5.empty() && md5 != lower(o.md5))
    throw DataError("download of " + o.url + ": MD5 " + md5 + ", expected " + lower(o.md5) +
                    " (corrupt, or not the expected file)");
  out.commit();
  if (o.log)
    *o.log << ">> Downloaded " << final_path << ", " << sink.bytes << " bytes, MD5 " << md5 << "\n"
           << std::flush;
}

/// True when `path` names no entry outside the directory it is unpacked in.
inline bool safe_entry_path(const std::string& path) {
  if (path.empty() || path.front() == '/') return false;
  for (const auto& part : std::filesystem::path(path))
    if (part == "..") return false;
  return true;
}

/// What unpacking may write: the most bytes of each named member (its path
/// in the archive), of any other regular file, of all files together, and
/// the most entries of any kind.
struct UnpackLimits {
  std::vector<std::pair<std::string, std::uint64_t>> member_bytes;
  std::uint64_t other_file_bytes = 0;
  std::uint64_t total_bytes = 0;
  std::uint64_t max_entries = 0;
};

/// The limits `o` sets for the CIFAR-10 tarball (DownloadOptions).
inline UnpackLimits unpack_limits(const DownloadOptions& o) {
  UnpackLimits l;
  for (const char* f : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                        "data_batch_5.bin", "test_batch.bin"})
    l.member_bytes.emplace_back(o.archive_dir + "/" + f, o.batch_file_bytes);
  l.other_file_bytes = o.other_file_bytes;
  l.total_bytes = 6 * o.batch_file_bytes + o.other_file_bytes;
  l.max_entries = o.max_entries;
  return l;
}

/// Keeps the count of what unpacking `archive` writes within `limits`: each
/// entry is admitted by its header (its declared size) before anything is
/// written, and each data block by its extent before it is written, so a
/// size that the header understates is caught too. Every refusal is a
/// DataError naming the archive, the entry and the bound.
class UnpackBudget {
 public:
  UnpackBudget(UnpackLimits limits, std::string archive)
      : limits_(std::move(limits)), archive_(std::move(archive)) {}

  /// Starts the next entry, `name` as the archive spells it: `writes` when
  /// its data will be written (a regular file), `declared` its size when
  /// the header gives one (-1: none).
  void begin_entry(const std::string& name, bool writes, std::int64_t declared) {
    name_ = name;
    written_ = 0;
    if (++entries_ > limits_.max_entries)
      refuse("entry '" + name + "' is one more than the " + std::to_string(limits_.max_entries) +
             " entries expected of the whole archive");
    bound_ = writes ? bound_of(name) : 0;
    if (!writes) return;
    if (declared > 0 && std::uint64_t(declared) > bound_)
      refuse(too_large(std::uint64_t(declared), "declares"));
    if (declared > 0 && std::uint64_t(declared) > limits_.total_bytes - total_)
      refuse(too_much(total_ + std::uint64_t(declared)));
  }

  /// Admits `size` bytes at `offset` of the current entry; throws before a
  /// byte past the entry's bound or the total is written.
  void admit(std::int64_t offset, std::uint64_t size) {
    if (offset < 0) refuse("entry '" + name_ + "' has a data block at a negative offset");
    const std::uint64_t begin = std::uint64_t(offset);
    if (begin > bound_ || size > bound_ - begin) refuse(too_large(begin + size, "holds at least"));
    const std::uint64_t end = begin + size;
    const std::uint64_t grown = end > written_ ? end - written_ : 0;  // sparse blocks may come in any order
    if (grown > limits_.total_bytes - total_) refuse(too_much(total_ + grown));
    total_ += grown;
    written_ += grown;
  }

  std::uint64_t total() const { return total_; }

 private:
  std::uint64_t bound_of(const std::string& name) const {
    const std::string key = std::filesystem::path(name).lexically_normal().generic_string();
    for (const auto& [member, bytes] : limits_.member_bytes)
      if (member == key) return bytes;
    return limits_.other_file_bytes;
  }
  std::string too_large(std::uint64_t bytes, const char* verb) const {
    return "entry '" + name_ + "' " + verb + " " + std::to_string(bytes) + " bytes, more than the " +
           std::to_string(bound_) + " expected of it";
  }
  std::string too_much(std::uint64_t bytes) const {
    return "entry '" + name_ + "' brings the files to " + std::to_string(bytes) + " bytes, more than the " +
           std::to_string(limits_.total_bytes) + " expected of the whole archive";
  }
  [[noreturn]] void refuse(const std::string& why) const {
    throw DataError("cannot unpack '" + archive_ + "': " + why + " (not the expected data set)");
  }

  UnpackLimits limits_;
  std::string archive_, name_;
  std::uint64_t entries_ = 0, bound_ = 0, written_ = 0, total_ = 0;
};

/// Unpacks the tarball at `archive_path` under `into` (an empty directory)
/// within `limits` (UnpackBudget): an entry past them is refused before its
/// excess is written, and a file it had begun is removed.
inline void unpack(const std::string& archive_path, const std::string& into, const UnpackLimits& limits) {
  using ArchivePtr = std::unique_ptr<archive, int (*)(archive*)>;
  ArchivePtr in(archive_read_new(), &archive_read_free);
  ArchivePtr out(archive_write_disk_new(), &archive_write_free);
  if (!in || !out) throw Error("libarchive could not allocate a reader or writer");
  archive_read_support_filter_all(in.get());
  archive_read_support_format_tar(in.get());
  // Entry names are checked here (relative, no '..', no links written), so
  // libarchive's own path checks, which would also judge `into`, stay off.
  archive_write_disk_set_options(out.get(), 0);
  auto fail = [&](archive* a, const std::string& where) {
    const char* why = archive_error_string(a);
    return DataError("cannot unpack '" + archive_path + "'" + where + ": " + (why ? why : "unknown error"));
  };
  if (archive_read_open_filename(in.get(), archive_path.c_str(), std::size_t(1) << 16) != ARCHIVE_OK)
    throw fail(in.get(), "");
  UnpackBudget budget(limits, archive_path);
  for (;;) {
    archive_entry* e = nullptr;
    const int r = archive_read_next_header(in.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) throw fail(in.get(), "");
    const std::string name = archive_entry_pathname(e) ? archive_entry_pathname(e) : "";
    if (!safe_entry_path(name))
      throw DataError("cannot unpack '" + archive_path + "': entry '" + name +
                      "' would land outside the directory it is unpacked in");
    const auto type = archive_entry_filetype(e);
    const bool regular = type == AE_IFREG && !archive_entry_hardlink(e);
    budget.begin_entry(name, regular, archive_entry_size_is_set(e) ? archive_entry_size(e) : -1);
    if ((type != AE_IFREG && type != AE_IFDIR) || archive_entry_hardlink(e)) {
      archive_read_data_skip(in.get());  // links, devices: not part of the data set
      continue;
    }
    const std::string target = (std::filesystem::path(into) / name).string();
    archive_entry_set_pathname(e, target.c_str());
    if (archive_write_header(out.get(), e) < ARCHIVE_WARN) throw fail(out.get(), " at '" + name + "'");
    const void* buf;
    std::size_t size;
    la_int64_t offset;
    for (;;) {
      const int rr = archive_read_data_block(in.get(), &buf, &size, &offset);
      if (rr == ARCHIVE_EOF) break;
      if (rr < ARCHIVE_WARN) throw fail(in.get(), " at '" + name + "'");
      try {
        budget.admit(offset, size);
      } catch (const DataError&) {
        out.reset();  // closes the file (libarchive pads it to its declared size, within the bound)
        std::error_code ec;
        std::filesystem::remove(target, ec);
        throw;
      }
      if (archive_write_data_block(out.get(), buf, size, offset) < ARCHIVE_WARN)
        throw fail(out.get(), " at '" + name + "'");
    }
    if (archive_write_finish_entry(out.get()) < ARCHIVE_WARN) throw fail(out.get(), " at '" + name + "'");
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK) throw fail(out.get(), "");
}

/// The tarball's file name: the last segment of the URL's path.
inline std::string tarball_name(const std::string& url) {
  std::string path = url.substr(0, url.find_first_of("?#"));
  const auto slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return name.empty() || name == "." || name == ".." ? "cifar-10-binary.tar.gz" : name;
}

}  // namespace detail

/// ConfigError unless `md5` is empty or 32 hex digits.
inline void check_md5_text(const std::string& md5) {
  bool ok = md5.empty() || md5.size() == 32;
  for (char c : md5) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'));
  if (!ok) throw ConfigError("expected MD5 '" + md5 + "' is not 32 hex digits");
}

/// Makes sure the CIFAR-10 binary set is in `dest` (see the top of this
/// file): downloads, verifies and unpacks it when it is not.
inline DownloadResult download_cifar10(const std::string& dest,
                                       const DownloadOptions& o = DownloadOptions{}) {
  namespace fs = std::filesystem;
  check_md5_text(o.md5);
  DownloadResult res;
  const std::string data_dir = (fs::path(dest) / o.archive_dir).string();
  for (const auto& d : {dest, data_dir})
    if (has_cifar10_binary(d)) {
      if (o.log) *o.log << "CIFAR-10 is already in " << d << ": not downloading\n" << std::flush;
      res.data_dir = d;
      return res;
    }
  std::error_code ec;
  if (fs::exists(data_dir, ec))
    throw IoError("'" + data_dir + "' exists but does not hold the whole CIFAR-10 binary set (" +
                  "data_batch_1..5.bin, test_batch.bin): remove it and run again to download it afresh");
  fs::create_directories(dest, ec);
  if (ec) throw IoError("cannot create '" + dest + "': " + ec.message());

  // 1. The tarball: kept from an earlier run when it checks out, else fetched.
  const std::string tarball = (fs::path(dest) / detail::tarball_name(o.url)).string();
  bool have = false;
  if (fs::is_regular_file(tarball, ec)) {
    const std::uint64_t size = fs::file_size(tarball, ec);
    have = !ec && (!o.bytes || size == o.bytes) &&
           (o.md5.empty() || detail::md5_of_file(tarball) == detail::lower(o.md5));
    if (o.log)
      *o.log << (have ? "Using " : "Replacing ") << tarball
             << (have ? ", already downloaded\n" : " (not of the expected size and MD5)\n") << std::flush;
  }
  if (!have) {
    detail::fetch_checked(o, tarball);
    res.downloaded = true;
  }
  // A tarball fetched by this call goes again if it cannot be unpacked, so
  // a failed call leaves nothing of its own in `dest`.
  detail::RemoveGuard fetched(res.downloaded ? tarball : std::string());

  // 2. Unpack into a temporary directory next to the destination.
  std::string tmp = (fs::path(dest) / ".extract-XXXXXX").string();
  if (!::mkdtemp(tmp.data())) {
    const int err = errno;
    throw IoError("cannot create a temporary directory in '" + dest + "': " + std::strerror(err));
  }
  detail::RemoveGuard guard(tmp);
  if (o.log) *o.log << ">> Extracting " << tarball << "\n" << std::flush;
  detail::unpack(tarball, tmp, detail::unpack_limits(o));

  // 3. Check what came out, then move it into place.
  const std::string unpacked = (fs::path(tmp) / o.archive_dir).string();
  if (!has_cifar10_binary(unpacked))
    throw DataError("'" + tarball + "' (from " + o.url + ") does not hold " + o.archive_dir +
                    "/ with data_batch_1..5.bin and test_batch.bin (whole 3,073-byte records)");
  fs::rename(unpacked, data_dir, ec);
  if (ec) throw IoError("cannot rename '" + unpacked + "' to '" + data_dir + "': " + ec.message());
  fetched.release();
  res.data_dir = data_dir;
  res.extracted = true;
  if (o.log) *o.log << "CIFAR-10 is in " << data_dir << "\n" << std::flush;
  return res;
}

}  // namespace data
}  // namespace cifarnet
