// cifarnet/data/cifar.hpp — readers of the CIFAR-10 and CIFAR-100 binary
// versions into an in-memory ImageSet (uint8, CHW per image, as on disk).
//
// CIFAR-10 (cifar-10-batches-bin/): data_batch_1..5.bin and test_batch.bin,
// records of 3,073 bytes: 1 label byte (0-9), then 1,024 red, 1,024 green,
// 1,024 blue bytes, each plane row-major 32x32; batches.meta.txt names the
// classes, one per line. CIFAR-100 (cifar-100-binary/): train.bin and
// test.bin, records of 3,074 bytes: coarse label (0-19), fine label (0-99),
// then the 3,072 pixel bytes; coarse_label_names.txt / fine_label_names.txt.
//
// Splits (TF_SEMANTICS.md §1): train = batches 1-4, validation = batch 5, eval = test
// batch, train_all = batches 1-5. Sizes are counted from the files, never
// hard-coded. A missing file is an IoError; an empty file is a DataError
// ("no examples in '<file>'"); a size that is not a whole number of records
// or a label out of range is a DataError naming the file and the byte offset.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/io/file.hpp"
#include "cifarnet/data/image.hpp"

namespace cifarnet {
namespace data {

/// The subsets of a data set (TF_SEMANTICS.md §1).
enum class Split { train, validation, eval, train_all };

inline const char* to_string(Split s) {
  switch (s) {
    case Split::train:
      return "train";
    case Split::validation:
      return "validation";
    case Split::eval:
      return "eval";
    case Split::train_all:
      return "train_all";
  }
  return "?";
}

/// Parses "train", "validation", "eval" (or "test") and "train_all".
inline Split parse_split(const std::string& s) {
  if (s == "train") return Split::train;
  if (s == "validation") return Split::validation;
  if (s == "eval" || s == "test") return Split::eval;
  if (s == "train_all") return Split::train_all;
  throw ConfigError("unknown split '" + s + "' (expected train, validation, eval or train_all)");
}

/// Bytes per CIFAR-10 record: label + 32*32*3 pixels.
inline constexpr std::size_t kCifar10RecordBytes = 3073;
/// Bytes per CIFAR-100 record: coarse label + fine label + 32*32*3 pixels.
inline constexpr std::size_t kCifar100RecordBytes = 3074;
/// The geometry of every CIFAR image.
inline constexpr ImageGeometry kCifarGeometry{32, 32, 3};

/// The CIFAR-10 class names, as batches.meta.txt lists them.
inline std::vector<std::string> cifar10_default_class_names() {
  return {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
}

/// File names (relative to cifar-10-batches-bin/) making up a split.
inline std::vector<std::string> cifar10_files(Split s) {
  switch (s) {
    case Split::train:
      return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin"};
    case Split::validation:
      return {"data_batch_5.bin"};
    case Split::eval:
      return {"test_batch.bin"};
    case Split::train_all:
      return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
              "data_batch_5.bin"};
  }
  return {};
}

/// File name (relative to cifar-100-binary/) of a CIFAR-100 split; CIFAR-100
/// ships only train (= train_all) and test (= eval).
inline std::string cifar100_file(Split s) {
  switch (s) {
    case Split::train:
    case Split::train_all:
      return "train.bin";
    case Split::eval:
      return "test.bin";
    case Split::validation:
      break;
  }
  throw ConfigError("split 'validation' does not exist for CIFAR-100 (it has train/train_all and eval)");
}

namespace detail {
inline std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

/// Parses records of `label_bytes` label bytes followed by g.size() pixel
/// bytes. The last label byte is the primary label (< num_classes); with two
/// label bytes the first is the coarse label (< num_coarse).
inline void parse_label_image_records(const std::vector<std::uint8_t>& bytes, const std::string& path,
                                      std::size_t label_bytes, const ImageGeometry& g,
                                      std::size_t num_classes, std::size_t num_coarse, ImageSet& out) {
  const std::size_t rec = label_bytes + g.size();
  if (bytes.empty())
    throw DataError(cifarnet::detail::concat(
        "no examples in '", path, "': the file is empty (0 bytes; expected ", "records of ", rec, " bytes)"));
  if (bytes.size() % rec != 0)
    throw DataError(cifarnet::detail::at_file(
        path, bytes.size() - bytes.size() % rec,
        cifarnet::detail::concat("file size ", bytes.size(), " is not a multiple of the record size ", rec,
                                 " (truncated record of ", bytes.size() % rec, " bytes)")));
  const std::size_t n = bytes.size() / rec;
  out.geometry = g;
  out.pixels.resize(n * g.size());
  out.labels.resize(n);
  if (label_bytes == 2) out.coarse_labels.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t* r = bytes.data() + i * rec;
    if (label_bytes == 2) {
      if (r[0] >= num_coarse)
        throw DataError(cifarnet::detail::at_file(
            path, i * rec,
            cifarnet::detail::concat("coarse label ", int(r[0]), " out of range [0, ", num_coarse, ")")));
      out.coarse_labels[i] = r[0];
    }
    const std::uint8_t label = r[label_bytes - 1];
    if (label >= num_classes)
      throw DataError(cifarnet::detail::at_file(
          path, i * rec + label_bytes - 1,
          cifarnet::detail::concat("label ", int(label), " out of range [0, ", num_classes, ")")));
    out.labels[i] = label;
    std::copy(r + label_bytes, r + rec, out.pixels.data() + i * g.size());
  }
}

/// Reads a whole file of CIFAR records of geometry 32x32x3.
inline ImageSet read_records(const std::string& path, std::size_t label_bytes, std::size_t num_classes,
                             std::size_t num_coarse) {
  ImageSet set;
  set.num_classes = num_classes;
  parse_label_image_records(io::read_file(path), path, label_bytes, kCifarGeometry, num_classes, num_coarse,
                            set);
  return set;
}
}  // namespace detail

/// Reads a class-name file (one name per line; trailing blank lines and
/// '\r' are ignored). IoError when missing.
inline std::vector<std::string> read_class_names(const std::string& path) {
  const auto bytes = io::read_file(path);
  std::vector<std::string> names;
  std::string cur;
  for (std::uint8_t b : bytes) {
    if (b == '\n') {
      names.push_back(cur);
      cur.clear();
    } else if (b != '\r') {
      cur.push_back(static_cast<char>(b));
    }
  }
  if (!cur.empty()) names.push_back(cur);
  while (!names.empty() && names.back().empty()) names.pop_back();
  return names;
}

namespace detail {
/// Reads a class-name file into `out` if it exists (false if it does not);
/// DataError unless it lists exactly `expect` names.
inline bool read_optional_class_names(const std::string& path, std::size_t expect,
                                      std::vector<std::string>& out) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  std::fclose(f);
  out = read_class_names(path);
  if (out.size() != expect)
    throw DataError(cifarnet::detail::at_file(
        path, 0, cifarnet::detail::concat("expected ", expect, " class names, found ", out.size())));
  return true;
}
}  // namespace detail

/// Reads one CIFAR-10 binary batch file (any number of records).
inline ImageSet read_cifar10_file(const std::string& path) { return detail::read_records(path, 1, 10, 0); }

/// Reads a CIFAR-10 split from `dir` (the cifar-10-batches-bin directory).
/// Class names come from batches.meta.txt when it exists (it must then list
/// exactly 10), otherwise the standard names are used.
inline ImageSet read_cifar10(const std::string& dir, Split split) {
  ImageSet set;
  for (const auto& f : cifar10_files(split)) {
    const std::string path = detail::join_path(dir, f);
    if (set.labels.empty())
      set = read_cifar10_file(path);
    else
      set.append(read_cifar10_file(path));
  }
  if (!detail::read_optional_class_names(detail::join_path(dir, "batches.meta.txt"), 10, set.class_names))
    set.class_names = cifar10_default_class_names();
  return set;
}

/// Where the CIFAR-10 binary set is published (the tutorial's DATA_URL),
/// its size in bytes and its MD5; data/download.hpp fetches it.
inline constexpr const char* kCifar10Url = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";
inline constexpr std::uint64_t kCifar10TarBytes = 170052171;
inline constexpr const char* kCifar10TarMd5 = "c32a1d4ab5d03f1284b67883e8d87530";
/// The directory the tarball unpacks to.
inline constexpr const char* kCifar10BinDir = "cifar-10-batches-bin";

/// True when `dir` holds the whole CIFAR-10 binary set: data_batch_1..5.bin
/// and test_batch.bin, each a regular file of a non-zero whole number of
/// 3,073-byte records (their contents are checked when read).
inline bool has_cifar10_binary(const std::string& dir) {
  std::vector<std::string> names = cifar10_files(Split::train_all);
  names.push_back(cifar10_files(Split::eval).front());
  for (const auto& name : names) {
    std::error_code ec;
    const auto path = std::filesystem::path(dir) / name;
    if (!std::filesystem::is_regular_file(path, ec)) return false;
    const auto n = std::filesystem::file_size(path, ec);
    if (ec || n == 0 || n % kCifar10RecordBytes != 0) return false;
  }
  return true;
}

/// The directory holding the binary files for a --data-dir: `dir` itself,
/// or its cifar-10-batches-bin/ subdirectory (where the tarball unpacks, the
/// tutorial's layout) when only that one holds them. Otherwise `dir`, so a
/// reader names the file missing there.
inline std::string cifar10_binary_dir(const std::string& dir) {
  if (has_cifar10_binary(dir)) return dir;
  const std::string sub = detail::join_path(dir, kCifar10BinDir);
  return has_cifar10_binary(sub) ? sub : dir;
}

/// Reads one CIFAR-100 binary file: `labels` gets the fine label (0-99),
/// `coarse_labels` the coarse one (0-19).
inline ImageSet read_cifar100_file(const std::string& path) { return detail::read_records(path, 2, 100, 20); }

/// Reads a CIFAR-100 split from `dir` (the cifar-100-binary directory);
/// class names from fine_label_names.txt / coarse_label_names.txt when present.
inline ImageSet read_cifar100(const std::string& dir, Split split) {
  ImageSet set = read_cifar100_file(detail::join_path(dir, cifar100_file(split)));
  detail::read_optional_class_names(detail::join_path(dir, "fine_label_names.txt"), 100, set.class_names);
  detail::read_optional_class_names(detail::join_path(dir, "coarse_label_names.txt"), 20,
                                    set.coarse_class_names);
  return set;
}

}  // namespace data
}  // namespace cifarnet
