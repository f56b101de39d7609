// Tests of cifarnet/data/download.hpp with file:// URLs to tarballs the
// tests build (libarchive), never the network: a good tarball (its own size
// and MD5 passed in), the skip when the set is already there, a truncated
// tarball, a wrong checksum, an archive of the wrong shape; each failure with
// a clear error and nothing left behind in the destination; and the bounded
// unpacking: a member larger than expected (a gzip bomb), more bytes in all,
// more entries, refused before the excess is written (checked under a
// file-size limit) and with what was written within the bounds.
#include <catch2/catch.hpp>

#include <cifarnet/data/cifar.hpp>
#include <cifarnet/data/download.hpp>

#include <archive.h>
#include <archive_entry.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "data_test_util.hpp"

using namespace cifarnet;
using namespace cifarnet::data;
using cifarnet_test::read_bytes;
using cifarnet_test::require_throws_with;
using cifarnet_test::TempDir;
using cifarnet_test::write_bytes;
namespace fs = std::filesystem;

namespace {

using Entries = std::vector<std::pair<std::string, std::vector<std::uint8_t>>>;

/// A .tar.gz holding `entries` (name, bytes), written with libarchive.
void write_tar_gz(const std::string& path, const Entries& entries) {
  archive* a = archive_write_new();
  REQUIRE(archive_write_add_filter_gzip(a) == ARCHIVE_OK);
  REQUIRE(archive_write_set_format_pax_restricted(a) == ARCHIVE_OK);
  REQUIRE(archive_write_open_filename(a, path.c_str()) == ARCHIVE_OK);
  for (const auto& [name, bytes] : entries) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(bytes.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    REQUIRE(archive_write_header(a, e) == ARCHIVE_OK);
    REQUIRE(archive_write_data(a, bytes.data(), bytes.size()) == static_cast<la_ssize_t>(bytes.size()));
    archive_entry_free(e);
  }
  REQUIRE(archive_write_close(a) == ARCHIVE_OK);
  archive_write_free(a);
}

/// The six batch files of a small set (3 records each), as the tarball
/// holds them under `prefix`.
Entries cifar_entries(const std::string& prefix = "cifar-10-batches-bin/") {
  TempDir d;
  cifarnet_test::write_cifar10_dir(d, 3);
  Entries out;
  for (const char* f : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                        "data_batch_5.bin", "test_batch.bin", "batches.meta.txt"})
    out.emplace_back(prefix + f, read_bytes(d.file(f)));
  return out;
}

std::string url_of(const std::string& path) { return "file://" + path; }

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  if (!fs::exists(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// The bytes of the regular files under `dir` (0 when it is gone).
std::uint64_t disk_use(const std::string& dir) {
  std::uint64_t n = 0;
  if (!fs::exists(dir)) return 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}

/// While alive, no file of this process may grow past `bytes`
/// (RLIMIT_FSIZE; SIGXFSZ ignored, so such a write fails with EFBIG instead
/// of killing the test): an unpacker that wrote an oversized member before
/// checking it fails with libarchive's "File too large", not the bound's
/// message, and never fills the disk.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old_) == 0);
    rlimit l = old_;
    l.rlim_cur = std::min(old_.rlim_cur, bytes);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &l) == 0);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = SIG_DFL;
};

/// Options for a file:// tarball with its own size and MD5.
DownloadOptions options_for(const std::string& tarball) {
  DownloadOptions o;
  o.url = url_of(tarball);
  o.bytes = fs::file_size(tarball);
  o.md5 = data::detail::md5_of_file(tarball);
  return o;
}

}  // namespace

TEST_CASE("MD5 through OpenSSL matches the RFC 1321 test vectors", "[data][download]") {
  TempDir d;
  write_bytes(d.file("empty"), {});
  write_bytes(d.file("abc"), {'a', 'b', 'c'});
  CHECK(data::detail::md5_of_file(d.file("empty")) == "d41d8cd98f00b204e9800998ecf8427e");
  CHECK(data::detail::md5_of_file(d.file("abc")) == "900150983cd24fb0d6963f7d28e17f72");
  CHECK(data::detail::tarball_name(kCifar10Url) == "cifar-10-binary.tar.gz");
  CHECK(DownloadOptions().md5 == "c32a1d4ab5d03f1284b67883e8d87530");
}

TEST_CASE("download_cifar10 fetches, verifies and unpacks a tarball, then skips when the set is there",
          "[data][download]") {
  TempDir src, dest_root;
  const std::string tarball = src.file("tiny-cifar.tar.gz");
  write_tar_gz(tarball, cifar_entries());
  DownloadOptions o = options_for(tarball);
  std::ostringstream log;
  o.log = &log;
  const std::string dest = dest_root.file("data");  // created by the call

  const DownloadResult r = download_cifar10(dest, o);
  CHECK(r.downloaded);
  CHECK(r.extracted);
  CHECK(r.data_dir == dest + "/cifar-10-batches-bin");
  CHECK(has_cifar10_binary(r.data_dir));
  CHECK(listing(dest) == std::vector<std::string>{"cifar-10-batches-bin", "tiny-cifar.tar.gz"});
  CHECK(read_bytes(dest + "/tiny-cifar.tar.gz") == read_bytes(tarball));
  const ImageSet got = read_cifar10(r.data_dir, Split::train_all);
  TempDir ref;
  cifarnet_test::write_cifar10_dir(ref, 3);
  CHECK(got.pixels == read_cifar10(ref.str(), Split::train_all).pixels);
  CHECK(log.str().find(">> Downloading " + o.url) != std::string::npos);

  // Again: the set is there, nothing is fetched (the URL is gone now).
  fs::remove(tarball);
  log.str("");
  const DownloadResult again = download_cifar10(dest, o);
  CHECK_FALSE(again.downloaded);
  CHECK_FALSE(again.extracted);
  CHECK(again.data_dir == r.data_dir);
  CHECK(log.str() == "CIFAR-10 is already in " + r.data_dir + ": not downloading\n");
  // Pointed at the batch directory itself, also nothing to do.
  CHECK(download_cifar10(r.data_dir, o).data_dir == r.data_dir);

  // The unpacked set removed, the kept tarball is unpacked again, not fetched.
  fs::remove_all(r.data_dir);
  const DownloadResult reused = download_cifar10(dest, o);
  CHECK_FALSE(reused.downloaded);
  CHECK(reused.extracted);
  CHECK(has_cifar10_binary(reused.data_dir));
}

TEST_CASE("download_cifar10 fails clearly and leaves nothing behind", "[data][download]") {
  TempDir src, dest_root;
  const std::string good = src.file("cifar.tar.gz");
  write_tar_gz(good, cifar_entries());
  const DownloadOptions ok = options_for(good);
  const std::string dest = dest_root.file("data");
  const auto good_bytes = read_bytes(good);
  const std::string truncated = src.file("truncated.tar.gz");
  write_bytes(truncated,
              std::vector<std::uint8_t>(good_bytes.begin(), good_bytes.begin() + good_bytes.size() / 2));

  SECTION("a truncated tarball, its expected size given") {
    DownloadOptions o = ok;
    o.url = url_of(truncated);
    require_throws_with<DataError>(
        [&] { download_cifar10(dest, o); },
        {"download of " + o.url, "got " + std::to_string(good_bytes.size() / 2) + " bytes, expected " +
                                     std::to_string(good_bytes.size())});
  }
  SECTION("a truncated tarball, no size or checksum given: libarchive finds it") {
    DownloadOptions o;
    o.url = url_of(truncated);
    o.bytes = 0;
    o.md5.clear();
    require_throws_with<DataError>([&] { download_cifar10(dest, o); },
                                   {"cannot unpack '" + dest + "/truncated.tar.gz'"});
  }
  SECTION("a wrong checksum") {
    DownloadOptions o = ok;
    o.md5 = "0123456789abcdef0123456789ABCDEF";
    require_throws_with<DataError>(
        [&] { download_cifar10(dest, o); },
        {"download of " + o.url, "MD5 " + ok.md5, "expected 0123456789abcdef0123456789abcdef"});
  }
  SECTION("a longer file than expected stops the transfer") {
    DownloadOptions o = ok;
    o.bytes = 100;
    o.md5.clear();
    require_throws_with<DataError>([&] { download_cifar10(dest, o); },
                                   {"download of " + o.url, "more than the expected 100 bytes"});
  }
  SECTION("a URL that does not resolve") {
    DownloadOptions o = ok;
    o.url = url_of(src.file("missing.tar.gz"));
    require_throws_with<IoError>([&] { download_cifar10(dest, o); }, {"download of " + o.url + " failed"});
  }
  SECTION("an archive without cifar-10-batches-bin/") {
    const std::string flat = src.file("flat.tar.gz");
    write_tar_gz(flat, cifar_entries(""));
    require_throws_with<DataError>([&] { download_cifar10(dest, options_for(flat)); },
                                   {dest + "/flat.tar.gz", "does not hold cifar-10-batches-bin/"});
  }
  SECTION("an archive with a batch file cut short") {
    Entries e = cifar_entries();
    e[2].second.resize(3073 * 2 + 100);
    const std::string cut = src.file("cut.tar.gz");
    write_tar_gz(cut, e);
    require_throws_with<DataError>([&] { download_cifar10(dest, options_for(cut)); },
                                   {"does not hold cifar-10-batches-bin/"});
  }
  SECTION("an entry that would land outside the destination") {
    Entries e = cifar_entries();
    e.emplace_back("cifar-10-batches-bin/../../escaped.txt", std::vector<std::uint8_t>{'x'});
    const std::string evil = src.file("evil.tar.gz");
    write_tar_gz(evil, e);
    require_throws_with<DataError>([&] { download_cifar10(dest, options_for(evil)); },
                                   {"entry 'cifar-10-batches-bin/../../escaped.txt' would land outside"});
    CHECK_FALSE(fs::exists(dest_root.file("escaped.txt")));
  }
  SECTION("an incomplete cifar-10-batches-bin/ already there is not touched") {
    fs::create_directories(dest + "/cifar-10-batches-bin");
    write_bytes(dest + "/cifar-10-batches-bin/data_batch_1.bin", std::vector<std::uint8_t>(3073, 1));
    require_throws_with<IoError>([&] { download_cifar10(dest, ok); },
                                 {"'" + dest + "/cifar-10-batches-bin' exists but does not hold"});
    CHECK(listing(dest) == std::vector<std::string>{"cifar-10-batches-bin"});
    CHECK(listing(dest + "/cifar-10-batches-bin") == std::vector<std::string>{"data_batch_1.bin"});
    return;
  }
  // Nothing half-done: no tarball, no temporary file or directory.
  CHECK(listing(dest).empty());
  // And the good tarball still goes through afterwards.
  CHECK(download_cifar10(dest, ok).extracted);
}

TEST_CASE("download_cifar10 refuses a batch file larger than 10,000 records before writing it",
          "[data][download]") {
  TempDir src, dest_root;
  Entries e = cifar_entries();
  REQUIRE(e[0].first == "cifar-10-batches-bin/data_batch_1.bin");
  const std::uint64_t bomb_bytes = kCifar10BatchFileBytes + (1 << 20);  // 1 MiB too many, of zeros
  e[0].second.assign(bomb_bytes, 0);
  const std::string bomb = src.file("bomb.tar.gz");
  write_tar_gz(bomb, e);
  CHECK(fs::file_size(bomb) < bomb_bytes / 100);  // what makes it a bomb: it inflates 100-fold and more
  const std::string dest = dest_root.file("data");
  {
    FileSizeLimit limit(1 << 20);  // the tarball itself fits, the member does not
    require_throws_with<DataError>(
        [&] { download_cifar10(dest, options_for(bomb)); },
        {"cannot unpack '" + dest + "/bomb.tar.gz'",
         "entry 'cifar-10-batches-bin/data_batch_1.bin' declares " + std::to_string(bomb_bytes) + " bytes",
         "more than the 30730000 expected of it"});
  }
  // Nothing written is left: no tarball, no temporary directory, no member.
  CHECK(listing(dest).empty());
  CHECK(disk_use(dest_root.str()) == 0);
}

TEST_CASE("unpacking stops at each member's expected size, the total and the entry count",
          "[data][download]") {
  TempDir src, out;
  data::detail::UnpackLimits lim;
  lim.member_bytes = {{"set/a.bin", 10000}, {"set/b.bin", 10000}};
  lim.other_file_bytes = 100;
  lim.total_bytes = 15000;
  lim.max_entries = 4;
  const std::string tgz = src.file("t.tar.gz");
  auto bytes = [](std::size_t n) { return std::vector<std::uint8_t>(n, 7); };
  auto unpack = [&] {
    FileSizeLimit limit(64 << 10);  // far below the 1 MiB members below
    data::detail::unpack(tgz, out.str(), lim);
  };

  SECTION("within the bounds, exactly at them, names spelled with ./") {
    write_tar_gz(tgz,
                 {{"./set/a.bin", bytes(10000)}, {"set/b.bin", bytes(4900)}, {"set/readme", bytes(100)}});
    unpack();
    CHECK(fs::file_size(out.file("set/a.bin")) == 10000);
    CHECK(disk_use(out.str()) == 15000);
  }
  SECTION("a named member larger than its size") {
    write_tar_gz(tgz, {{"set/b.bin", bytes(500)}, {"set/a.bin", bytes(10000 + (1 << 20))}});
    require_throws_with<DataError>(unpack, {"cannot unpack '" + tgz + "'",
                                            "entry 'set/a.bin' declares 1058576 bytes, more than the 10000"});
    CHECK_FALSE(fs::exists(out.file("set/a.bin")));
    CHECK(disk_use(out.str()) == 500);
  }
  SECTION("any other file larger than other_file_bytes") {
    write_tar_gz(tgz, {{"set/c.bin", bytes(1 << 20)}});
    require_throws_with<DataError>(unpack, {"entry 'set/c.bin' declares 1048576 bytes, more than the 100"});
    CHECK(disk_use(out.str()) == 0);
  }
  SECTION("more bytes in all than the total") {
    write_tar_gz(tgz, {{"set/a.bin", bytes(9000)}, {"set/b.bin", bytes(9000)}});
    require_throws_with<DataError>(
        unpack,
        {"entry 'set/b.bin' brings the files to 18000 bytes, more than the 15000 expected of the whole"});
    CHECK(fs::file_size(out.file("set/a.bin")) == 9000);
    CHECK_FALSE(fs::exists(out.file("set/b.bin")));
    CHECK(disk_use(out.str()) <= lim.total_bytes);
  }
  SECTION("more entries than expected") {
    write_tar_gz(tgz, {{"set/1", bytes(1)},
                       {"set/2", bytes(1)},
                       {"set/3", bytes(1)},
                       {"set/4", bytes(1)},
                       {"set/5", bytes(1)}});
    require_throws_with<DataError>(unpack, {"entry 'set/5' is one more than the 4 entries expected"});
    CHECK(disk_use(out.str()) == 4);
  }
}

TEST_CASE("the unpack budget checks every data block, so a size the header understates is caught",
          "[data][download]") {
  data::detail::UnpackLimits lim;
  lim.member_bytes = {{"set/a.bin", 10000}, {"set/b.bin", 10000}};
  lim.other_file_bytes = 100;
  lim.total_bytes = 15000;
  lim.max_entries = 8;
  data::detail::UnpackBudget b(lim, "x.tar.gz");

  b.begin_entry("set/a.bin", true, 5000);  // declares 5000, then brings more
  b.admit(0, 5000);
  b.admit(5000, 5000);
  require_throws_with<DataError>([&] { b.admit(10000, 1); },
                                 {"cannot unpack 'x.tar.gz': entry 'set/a.bin' holds at least 10001 bytes, "
                                  "more than the 10000 expected of it"});
  CHECK(b.total() == 10000);

  b.begin_entry("set/", false, -1);      // a directory: no bytes, one entry
  b.begin_entry("set/b.bin", true, -1);  // no size given: the total still holds
  b.admit(0, 5000);
  require_throws_with<DataError>([&] { b.admit(5000, 1); },
                                 {"brings the files to 15001 bytes, more than the 15000"});

  data::detail::UnpackBudget sparse(lim, "x.tar.gz");
  sparse.begin_entry("set/a.bin", true, -1);
  sparse.admit(8000, 2000);  // blocks in any order count the file's extent once
  sparse.admit(0, 100);
  CHECK(sparse.total() == 10000);
  require_throws_with<DataError>([&] { sparse.admit(std::numeric_limits<std::int64_t>::max(), 10); },
                                 {"entry 'set/a.bin' holds at least"});
  require_throws_with<DataError>([&] { sparse.admit(-1, 1); }, {"a negative offset"});
}
