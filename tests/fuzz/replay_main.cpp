// tests/fuzz/replay_main.cpp — runs saved inputs through the fuzz targets
// without libFuzzer (plain gcc builds, ctest): every crash found by fuzzing
// is kept under tests/fuzz/regressions/<target>/ and replayed here, with the
// seed corpus, on every test run.
//
// Usage: fuzz_replay <target> <file-or-directory>...
// Prints how many inputs it ran; exits non-zero when a path cannot be read
// or no input was found. A parser bug shows as a crash, a sanitizer report
// (sanitized builds), an escaped non-cifarnet exception or a FUZZ_CHECK abort.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "fuzz_target.hpp"

namespace cifarnet::fuzz {
static std::map<std::string, Body>& registry() {
  static std::map<std::string, Body> r;
  return r;
}
bool register_target(const char* name, Body body) {
  registry()[name] = body;
  return true;
}
}  // namespace cifarnet::fuzz

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  auto& reg = cifarnet::fuzz::registry();
  if (argc < 3 || !reg.count(argv[1])) {
    std::fprintf(stderr, "usage: %s <target> <file-or-directory>...\ntargets:", argv[0]);
    for (const auto& [name, body] : reg) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  const cifarnet::fuzz::Body body = reg.at(argv[1]);
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    const fs::path p(argv[i]);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "fuzz_replay: cannot read '%s'\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_replay: no input files\n");
    return 2;
  }
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "fuzz_replay: cannot read '%s'\n", f.c_str());
      return 2;
    }
    std::fprintf(stderr, "%s: %s (%zu bytes)\n", argv[1], f.c_str(), bytes.size());
    body(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("%s: %zu inputs replayed, no crash\n", argv[1], files.size());
  return 0;
}
