// cifarnet/backend/host/bf16.hpp — rounding float to bfloat16 on the host.
//
// round_to_bf16(x): x rounded to the nearest bfloat16 (ties to even), as a
// float; bf16_to_float(bits): the exact float of bfloat16 bits. store_bf16(in, out, n): n floats rounded to
// bfloat16 bits, the way oneDNN's float -> bf16 reorder does it on this CPU: with AVX512-BF16 (compiled for
// it, as CIFARNET_NATIVE on such a CPU does) the VCVTNEPS2BF16 instruction, which rounds to nearest even and
// treats denormal inputs and results as zero; elsewhere the same rounding in integer arithmetic (denormals
// kept). NaN stays a quiet NaN either way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define CIFARNET_HOST_BF16_AVX512 1
#endif

namespace cifarnet::backend::host {

/// The bfloat16 bits of x rounded to nearest, ties to even (NaN stays a
/// quiet NaN, overflow rounds to infinity).
inline std::uint16_t bf16_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return std::uint16_t((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}

/// x rounded to the nearest bfloat16 (ties to even), returned as float; NaN
/// stays NaN, infinities stay infinite.
inline float round_to_bf16(float x) {
  const std::uint32_t u = std::uint32_t(bf16_bits(x)) << 16;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

/// bfloat16 bits as a float (exact).
inline float bf16_to_float(std::uint16_t bits) {
  const std::uint32_t u = std::uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// An element as float: float as it is, bfloat16 bits widened exactly (the
/// host passes that take either, e.g. batch norm's and average pooling's).
inline float widen(float v) { return v; }
inline float widen(std::uint16_t bits) { return bf16_to_float(bits); }

/// out[i] = in[i] as bfloat16 bits, i < n (see the file comment for the
/// rounding).
inline void store_bf16(const float* in, std::uint16_t* out, std::size_t n) {
  std::size_t i = 0;
#ifdef CIFARNET_HOST_BF16_AVX512
  // Eight floats per load: the passes that call this per row have just
  // written `in` with 256-bit stores (GCC's preferred width here), and a
  // 512-bit load of two such stores cannot take their values from the store
  // buffer (a stall of about 15 cycles a row: batch norm's bf16 outputs ran
  // 1.6x slower than its float ones).
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     reinterpret_cast<__m128i>(_mm256_cvtneps_pbh(_mm256_loadu_ps(in + i))));
  if (i < n) {
    const __mmask8 k = __mmask8((1u << (n - i)) - 1u);
    _mm_mask_storeu_epi16(out + i, k,
                          reinterpret_cast<__m128i>(_mm256_cvtneps_pbh(_mm256_maskz_loadu_ps(k, in + i))));
  }
#else
  for (; i < n; ++i) out[i] = bf16_bits(in[i]);
#endif
}

}  // namespace cifarnet::backend::host
