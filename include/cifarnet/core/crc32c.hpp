// cifarnet/core/crc32c.hpp — CRC-32C (Castagnoli), and the "masked" form that
// TFRecord files and TensorBoard event files use for their framing.
//
// mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8, as in TensorFlow's
// tensorflow/core/lib/hash/crc32c.h.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace cifarnet {
namespace detail {
inline const std::array<std::uint32_t, 256>& crc32c_table() {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : (c >> 1);
      t[i] = c;
    }
    return t;
  }();
  return table;
}
}  // namespace detail

/// Extends a CRC-32C over `n` more bytes (start with crc = 0).
inline std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t n) {
  const auto& t = detail::crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  for (std::size_t i = 0; i < n; ++i) c = t[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

/// CRC-32C of a buffer.
inline std::uint32_t crc32c(const void* data, std::size_t n) { return crc32c_extend(0, data, n); }

/// TensorFlow's masked CRC (TFRecord and event-file framing).
inline std::uint32_t crc32c_mask(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/// Inverse of crc32c_mask.
inline std::uint32_t crc32c_unmask(std::uint32_t masked) {
  std::uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

/// Masked CRC-32C of a buffer.
inline std::uint32_t masked_crc32c(const void* data, std::size_t n) { return crc32c_mask(crc32c(data, n)); }

}  // namespace cifarnet
