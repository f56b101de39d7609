// Helpers shared by the data-area tests: a self-deleting temporary
// directory and writers of small synthetic CIFAR files whose every byte is
// known (pixel j of record r is pattern_byte(r, j)).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace cifarnet_test {

/// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    const auto base = std::filesystem::temp_directory_path();
    for (int attempt = 0; attempt < 100; ++attempt) {
      auto p = base / ("cifarnet_data_test_" + std::to_string(rd()) + "_" + std::to_string(attempt));
      if (std::filesystem::create_directory(p)) {
        path_ = p;
        return;
      }
    }
    FAIL("could not create a temporary directory");
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::uint8_t pattern_byte(std::size_t record, std::size_t j) {
  return static_cast<std::uint8_t>((record * 37 + j * 11 + (j / 1024) * 5) % 256);
}

inline void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

inline std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return std::vector<std::uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

/// CIFAR-10 records: label labels[r], pixels pattern_byte(first + r, j).
inline std::vector<std::uint8_t> cifar10_records(const std::vector<int>& labels, std::size_t first = 0) {
  std::vector<std::uint8_t> out;
  for (std::size_t r = 0; r < labels.size(); ++r) {
    out.push_back(static_cast<std::uint8_t>(labels[r]));
    for (std::size_t j = 0; j < 3072; ++j) out.push_back(pattern_byte(first + r, j));
  }
  return out;
}

/// CIFAR-100 records: coarse, fine, pixels pattern_byte(r, j).
inline std::vector<std::uint8_t> cifar100_records(const std::vector<int>& coarse,
                                                  const std::vector<int>& fine) {
  std::vector<std::uint8_t> out;
  for (std::size_t r = 0; r < fine.size(); ++r) {
    out.push_back(static_cast<std::uint8_t>(coarse[r]));
    out.push_back(static_cast<std::uint8_t>(fine[r]));
    for (std::size_t j = 0; j < 3072; ++j) out.push_back(pattern_byte(r, j));
  }
  return out;
}

/// A cifar-10-batches-bin directory: data_batch_b holds `per_batch`
/// records with labels (b * 3 + r) % 10 and record numbers counted across
/// batches 1..5 then the test batch.
inline void write_cifar10_dir(const TempDir& dir, std::size_t per_batch, bool with_meta = true) {
  std::size_t first = 0;
  const char* names[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                         "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
  for (int b = 0; b < 6; ++b) {
    std::vector<int> labels;
    for (std::size_t r = 0; r < per_batch; ++r) labels.push_back(static_cast<int>((b * 3 + r) % 10));
    write_bytes(dir.file(names[b]), cifar10_records(labels, first));
    first += per_batch;
  }
  if (with_meta) {
    std::ofstream m(dir.file("batches.meta.txt"));
    m << "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n";
  }
}

/// Checks that `fn` throws exception type E whose message contains every
/// one of `parts` (file name, offset...).
template <class E, class Fn>
void require_throws_with(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const E& e) {
    const std::string what = e.what();
    INFO("message: " << what);
    for (const auto& p : parts) CHECK(what.find(p) != std::string::npos);
    return;
  } catch (const std::exception& e) {
    FAIL("threw the wrong exception type: " << e.what());
  }
  FAIL("did not throw");
}

}  // namespace cifarnet_test
