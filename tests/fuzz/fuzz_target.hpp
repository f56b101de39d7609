// tests/fuzz/fuzz_target.hpp — one definition of a fuzz target, two builds.
//
// CIFARNET_FUZZ_TARGET(name) { body } defines the target's function body
// (int body(const std::uint8_t* data, std::size_t size)). Built with
// CIFARNET_LIBFUZZER (clang, -fsanitize=fuzzer), it becomes the translation
// unit's LLVMFuzzerTestOneInput; otherwise it registers itself with the
// replay driver (replay_main.cpp), which runs saved inputs through it in a
// plain (gcc) build, so every crash once found stays a ctest.
//
// Contract of every body: a cifarnet::Error is the expected way to reject
// bad input and is swallowed (ignore_errors); anything else escaping (another
// exception type), a sanitizer report, or a failed FUZZ_CHECK is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

#include "cifarnet/core/error.hpp"

namespace cifarnet::fuzz {

using Body = int (*)(const std::uint8_t*, std::size_t);
/// Registers a target with the replay driver (replay_main.cpp).
bool register_target(const char* name, Body body);

/// Runs f(); a cifarnet::Error is a clean rejection of the input.
template <class F>
void ignore_errors(F&& f) {
  try {
    f();
  } catch (const cifarnet::Error&) {
  }
}

/// A temporary file holding `size` bytes, removed when destroyed. In
/// /dev/shm when it exists (no disk I/O per execution), else $TMPDIR or /tmp.
class TempFile {
 public:
  TempFile(const std::uint8_t* data, std::size_t size, const char* suffix = "") {
    const char* dir = ::access("/dev/shm", W_OK) == 0
                          ? "/dev/shm"
                          : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
    path_ = std::string(dir) + "/cifarnet-fuzz-" + std::to_string(::getpid()) + suffix;
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f) std::abort();  // the harness, not the parser, failed
    if (size && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace cifarnet::fuzz

/// A property the parser must hold on every input it accepts.
#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

#ifdef CIFARNET_LIBFUZZER
#define CIFARNET_FUZZ_TARGET(name)                                                    \
  static int cifarnet_fuzz_body_##name(const std::uint8_t* data, std::size_t size);   \
  extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { \
    return cifarnet_fuzz_body_##name(data, size);                                     \
  }                                                                                   \
  static int cifarnet_fuzz_body_##name(const std::uint8_t* data, std::size_t size)
#else
#define CIFARNET_FUZZ_TARGET(name)                                                  \
  static int cifarnet_fuzz_body_##name(const std::uint8_t* data, std::size_t size); \
  [[maybe_unused]] static const bool cifarnet_fuzz_registered_##name =              \
      cifarnet::fuzz::register_target(#name, &cifarnet_fuzz_body_##name);           \
  static int cifarnet_fuzz_body_##name(const std::uint8_t* data, std::size_t size)
#endif
