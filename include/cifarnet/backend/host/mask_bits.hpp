// cifarnet/backend/host/mask_bits.hpp — a ReLU's mask as bits.
//
// The residual block's ReLU (Residual<..., FusedRelu>) is undone in the
// backward by the next block's sum, which multiplies its input gradient by
// the mask y > 0 of the block output y (Eltwise::add_masked). Reading that
// mask from y itself costs 4 bytes an element; the bits cost 1/8 of a byte:
// batch norm writes them in the pass that forms y (bn::affine_sum) and
// add_masked_bits reads them. Bit i % 16 of word i / 16 is element i.
// Both sides form the same predicate on the same float (y > 0, false for
// NaN and for -0), so the gradient is the same bits either way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace cifarnet::backend::host {

/// The mask word of y[0..16): bit l set where y[l] > 0 (an ordered compare:
/// NaN gives 0).
inline std::uint16_t positive_bits(const float* y) {
#if defined(__AVX512F__)
  return std::uint16_t(_mm512_cmp_ps_mask(_mm512_loadu_ps(y), _mm512_setzero_ps(), _CMP_GT_OQ));
#else
  std::uint16_t m = 0;
  for (int l = 0; l < 16; ++l) m = std::uint16_t(m | (y[l] > 0.f ? 1u << l : 0u));
  return m;
#endif
}

/// y[i] = a[i] + b[i] where bit i of `bits` is set, else 0, for the 16
/// elements of one mask word (y may alias a or b).
inline void add_masked_word(const float* a, const float* b, std::uint16_t bits, float* y) {
#if defined(__AVX512F__)
  _mm512_storeu_ps(y, _mm512_maskz_add_ps(__mmask16(bits), _mm512_loadu_ps(a), _mm512_loadu_ps(b)));
#else
  for (int l = 0; l < 16; ++l) y[l] = (bits >> l & 1u) ? a[l] + b[l] : 0.f;
#endif
}

/// add_masked_word with a given as bfloat16 bits (widened exactly): the
/// residual branch's gradient handed to the sum as bf16.
inline void add_masked_word(const std::uint16_t* a, const float* b, std::uint16_t bits, float* y) {
#if defined(__AVX512F__)
  const __m512i wide =
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))), 16);
  _mm512_storeu_ps(y, _mm512_maskz_add_ps(__mmask16(bits), _mm512_castsi512_ps(wide), _mm512_loadu_ps(b)));
#else
  for (int l = 0; l < 16; ++l) {
    std::uint32_t u = std::uint32_t(a[l]) << 16;
    float v;
    std::memcpy(&v, &u, sizeof v);
    y[l] = (bits >> l & 1u) ? v + b[l] : 0.f;
  }
#endif
}

}  // namespace cifarnet::backend::host
