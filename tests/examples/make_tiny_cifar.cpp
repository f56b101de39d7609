// tests/examples/make_tiny_cifar.cpp — writes a tiny data set in the
// CIFAR-10 binary layout for the example programs' smoke tests:
// data_batch_1.bin ... data_batch_5.bin and test_batch.bin (records of a
// label byte and 3,072 CHW pixel bytes) plus batches.meta.txt.
//
// The images are the library's learnable synthetic classes
// (demo/synthetic_cifar.hpp), each file from its own seed, so the test batch holds
// images never trained on.
//
//   make_tiny_cifar <out_dir> [images per training file = 300] [test images = 200]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <cifarnet/demo/synthetic_cifar.hpp>

namespace {

bool write_batch(const std::string& path, std::size_t n, std::uint64_t seed) {
  const cifarnet::data::ImageSet set = cifarnet::data::synthetic_cifar(n, seed);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::fprintf(stderr, "make_tiny_cifar: cannot create '%s'\n", path.c_str());
    return false;
  }
  bool ok = true;
  for (std::size_t i = 0; i < set.size() && ok; ++i) {
    const unsigned char label = static_cast<unsigned char>(set.labels[i]);
    ok = std::fwrite(&label, 1, 1, f) == 1 &&
         std::fwrite(set.image(i), 1, set.geometry.size(), f) == set.geometry.size();
  }
  ok = std::fclose(f) == 0 && ok;
  if (!ok) std::fprintf(stderr, "make_tiny_cifar: cannot write '%s'\n", path.c_str());
  return ok;
}

std::size_t count_arg(const char* s, const char* what) {
  char* end = nullptr;
  const unsigned long v = std::strtoul(s, &end, 10);
  if (!*s || *end || v == 0 || v > 10000) {
    std::fprintf(stderr, "make_tiny_cifar: %s '%s' must be an integer in [1, 10000]\n", what, s);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr,
                 "usage: make_tiny_cifar <out_dir> [images per training file = 300] [test images = 200]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const std::size_t per_file = argc > 2 ? count_arg(argv[2], "images per training file") : 300;
  const std::size_t test = argc > 3 ? count_arg(argv[3], "test images") : 200;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "make_tiny_cifar: cannot create '%s': %s\n", dir.c_str(), ec.message().c_str());
    return 1;
  }
  for (int k = 1; k <= 5; ++k)
    if (!write_batch(dir + "/data_batch_" + std::to_string(k) + ".bin", per_file, 100 + std::uint64_t(k)))
      return 1;
  if (!write_batch(dir + "/test_batch.bin", test, 200)) return 1;
  std::FILE* meta = std::fopen((dir + "/batches.meta.txt").c_str(), "w");
  if (!meta ||
      std::fputs("airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n", meta) < 0 ||
      std::fclose(meta) != 0) {
    std::fprintf(stderr, "make_tiny_cifar: cannot write '%s/batches.meta.txt'\n", dir.c_str());
    return 1;
  }
  std::printf("wrote %zu training images in data_batch_1..5.bin and %zu test images to %s\n", 5 * per_file,
              test, dir.c_str());
  return 0;
}
