// cifarnet/core/endian.hpp — little-endian integers in byte buffers, the one
// place the file formats (TFRecord framing, protobuf fixed32/fixed64,
// safetensors' header length) get them from.
//
// Byte-by-byte shifts, so the result does not depend on the host's byte
// order or on the alignment of the pointer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace cifarnet {
namespace detail {

/// Writes the sizeof(T) bytes of `v`, least significant first, at `p`.
template <class T>
void put_le(void* p, T v) {
  static_assert(std::is_unsigned_v<T>, "cifarnet: put_le takes an unsigned integer");
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t k = 0; k < sizeof(T); ++k) b[k] = static_cast<unsigned char>(v >> (8 * k));
}
/// Reads sizeof(T) bytes at `p`, least significant first.
template <class T>
T get_le(const void* p) {
  static_assert(std::is_unsigned_v<T>, "cifarnet: get_le returns an unsigned integer");
  const auto* b = static_cast<const unsigned char*>(p);
  T v = 0;
  for (std::size_t k = sizeof(T); k-- > 0;) v = static_cast<T>((v << 8) | b[k]);
  return v;
}
/// Appends the sizeof(T) bytes of `v`, least significant first.
template <class T>
void append_le(std::string& out, T v) {
  char b[sizeof(T)];
  put_le(b, v);
  out.append(b, sizeof(T));
}

inline void put_le32(void* p, std::uint32_t v) { put_le(p, v); }
inline void put_le64(void* p, std::uint64_t v) { put_le(p, v); }
inline std::uint32_t get_le32(const void* p) { return get_le<std::uint32_t>(p); }
inline std::uint64_t get_le64(const void* p) { return get_le<std::uint64_t>(p); }

}  // namespace detail
}  // namespace cifarnet
