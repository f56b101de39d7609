// cifarnet/core/error.hpp — the one exception hierarchy of the library.
//
// Everything a user or a file can get wrong is thrown as a subclass of
// cifarnet::Error, with a message that says what was expected, what was found
// and where (file and byte offset, layer name, flag). The library never calls
// exit(). Composition mistakes are static_asserts; internal invariants are
// debug-only asserts.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace cifarnet {

/// Base class of every error cifarnet throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error("cifarnet: " + what) {}
};

/// A tensor or layer shape does not fit (names the layer and both shapes).
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// A file could not be opened, read or written.
class IoError : public Error {
 public:
  using Error::Error;
};

/// A file was readable but its content is wrong (truncated, corrupt, out of
/// range). The message names the file and the byte offset.
class DataError : public Error {
 public:
  using Error::Error;
};

/// A bad option, flag or argument value (names the option).
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A backend (oneDNN, CUDA, MPI) reported a failure or is not available.
class BackendError : public Error {
 public:
  using Error::Error;
};

namespace distributed {
/// An MPI or NCCL call failed, a collective timed out (a peer died or
/// hangs), or the ranks disagree about something they must share.
class DistributedError : public BackendError {
 public:
  using BackendError::BackendError;
};
}  // namespace distributed

/// Training produced NaN or Inf.
class NumericsError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

/// "file 'x' at byte offset N: what"
inline std::string at_file(const std::string& file, std::uint64_t offset, const std::string& what) {
  return concat("file '", file, "' at byte offset ", offset, ": ", what);
}

template <class...>
inline constexpr bool dependent_false = false;
}  // namespace detail

}  // namespace cifarnet
