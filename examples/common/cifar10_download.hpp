// examples/common/cifar10_download.hpp — the --download flags that
// resnet_cifar10, cifar10_train and cifar10_to_tfrecords share: fetch the
// CIFAR-10 binary tarball into the data directory, check its size and MD5,
// unpack it to <data dir>/cifar-10-batches-bin/, or do nothing when the set
// is already there (cifarnet/data/download.hpp, the tutorial's
// maybe_download_and_extract). The programs read <data dir> or its
// cifar-10-batches-bin/, whichever holds the files (data::cifar10_binary_dir).
//
// In a build without the cifarnet::download component (libcurl, libarchive
// or libcrypto missing) --download is a clear error.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <ostream>
#include <string>

#include <cifarnet/core/error.hpp>
#include <cifarnet/data/cifar.hpp>
#ifdef CIFARNET_WITH_DOWNLOAD
#include <cifarnet/data/download.hpp>
#endif

namespace examples {

struct DownloadFlags {
  bool download = false;
  std::string url = cifarnet::data::kCifar10Url;
  std::string md5 = cifarnet::data::kCifar10TarMd5;
  std::uint64_t bytes = cifarnet::data::kCifar10TarBytes;
  std::string data_dir_flag;  // "--data-dir" or "--data_dir", for messages
};

/// Adds --download, --data-url, --data-md5, --data-bytes (with '_' in the
/// tutorial programs' style when `sep` is '_'); the last three need
/// --download.
inline void add_download_flags(CLI::App& app, DownloadFlags& f, const std::string& data_dir_flag,
                               char sep = '-') {
  f.data_dir_flag = data_dir_flag;
  const std::string s(1, sep);
  CLI::Option* dl = app.add_flag("--download", f.download,
                                 "Download the CIFAR-10 binary tarball into " + data_dir_flag +
                                     " and unpack it there (cifar-10-batches-bin/), checking its size and "
                                     "MD5; nothing is fetched when the data are already there.");
  app.add_option(
         "--data" + s + "url", f.url,
         "With --download: where to fetch the tarball (any URL libcurl takes: https, http, ftp, file).")
      ->needs(dl)
      ->capture_default_str();
  app.add_option("--data" + s + "md5", f.md5,
                 "With --download: the tarball's expected MD5 (32 hex digits; empty: not checked).")
      ->needs(dl)
      ->capture_default_str();
  app.add_option("--data" + s + "bytes", f.bytes,
                 "With --download: the tarball's expected size in bytes (0: not checked).")
      ->needs(dl)
      ->capture_default_str();
}

/// The flags' own errors (a ConfigError), before anything runs.
inline void validate_download(const DownloadFlags& f, const std::string& data_dir) {
  if (!f.download) return;
  if (data_dir.empty())
    throw cifarnet::ConfigError("--download needs " + f.data_dir_flag +
                                ": the directory to download CIFAR-10 into.");
#ifdef CIFARNET_WITH_DOWNLOAD
  cifarnet::data::check_md5_text(f.md5);
#else
  throw cifarnet::ConfigError(
      "--download: this build has no download support (the cifarnet::download component needs libcurl, "
      "libarchive and OpenSSL's libcrypto: install them with scripts/setup.sh and configure again).");
#endif
}

/// With --download, makes sure CIFAR-10 is in `data_dir` (downloading and
/// unpacking it when not), saying what it does on `log`.
inline void download_if_asked(const DownloadFlags& f, const std::string& data_dir, std::ostream& log) {
  validate_download(f, data_dir);
  if (!f.download) return;
#ifdef CIFARNET_WITH_DOWNLOAD
  cifarnet::data::DownloadOptions o;
  o.url = f.url;
  o.md5 = f.md5;
  o.bytes = f.bytes;
  o.log = &log;
  cifarnet::data::download_cifar10(data_dir, o);
#else
  (void)log;
#endif
}

}  // namespace examples
