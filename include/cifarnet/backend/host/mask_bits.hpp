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
// add_masked_word takes each operand and the result as float or bf16.
//
// keep_if(c, v) is `c ? v : 0.f` without a branch. GCC compiles a select
// whose arm computes a float (`m > 0 ? a + b : 0`, `dy * (z > 0 ? 1 : 0)`)
// as a branch around the arithmetic under its default -ftrapping-math (the
// arithmetic might raise an FP exception the source did not ask for), and a
// loop with a branch is not vectorized where there are no mask registers:
// on AVX2 every masked pass of the step ran one element at a time (ResNet-20
// fp32 training about 1.3x as fast with the selects written this way, on a
// 2-core AMD EPYC Zen 2: docs/BENCHMARKS.md). AVX-512 vectorized them with
// masks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cifarnet/backend/host/bf16.hpp"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace cifarnet::backend::host {

/// `keep ? v : 0.f` (+0) as a bit mask, not a branch: the same value,
/// NaN and infinities included, and loops of it vectorize without mask
/// registers (see the top of this file).
inline float keep_if(bool keep, float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  u &= 0u - std::uint32_t(keep);
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

/// The mask word of y[0..16): bit l set where y[l] > 0 (an ordered compare:
/// NaN gives 0).
inline std::uint16_t positive_bits(const float* y) {
#if defined(__AVX512F__)
  return std::uint16_t(_mm512_cmp_ps_mask(_mm512_loadu_ps(y), _mm512_setzero_ps(), _CMP_GT_OQ));
#elif defined(__AVX2__)
  const __m256 z = _mm256_setzero_ps();
  const unsigned lo = unsigned(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(y), z, _CMP_GT_OQ))),
                 hi = unsigned(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(y + 8), z, _CMP_GT_OQ)));
  return std::uint16_t(lo | hi << 8);
#else
  std::uint16_t m = 0;
  for (int l = 0; l < 16; ++l) m = std::uint16_t(m | (y[l] > 0.f ? 1u << l : 0u));
  return m;
#endif
}

namespace detail {
/// 16 elements as floats: float as they are, bfloat16 bits widened exactly.
inline void load16(const float* p, float* out) { std::memcpy(out, p, 16 * sizeof(float)); }
inline void load16(const std::uint16_t* p, float* out) {
  for (int l = 0; l < 16; ++l) {
    const std::uint32_t u = std::uint32_t(p[l]) << 16;
    std::memcpy(out + l, &u, sizeof(float));
  }
}
inline void store16(const float* v, float* p) { std::memcpy(p, v, 16 * sizeof(float)); }
inline void store16(const float* v, std::uint16_t* p) { store_bf16(v, p, 16); }
#if defined(__AVX512F__)
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const std::uint16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
inline void store16(__m512 v, float* p) { _mm512_storeu_ps(p, v); }
inline void store16(__m512 v, std::uint16_t* p) {
#ifdef CIFARNET_HOST_BF16_AVX512
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
#else
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  store_bf16(t, p, 16);
#endif
}
#elif defined(__AVX2__)
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const std::uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline void store8(__m256 v, float* p) { _mm256_storeu_ps(p, v); }
inline void store8(__m256 v, std::uint16_t* p) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  store_bf16(t, p, 8);
}
/// Lanes l of the 8 bits in `bits` as all-ones where set.
inline __m256 lanes8(unsigned bits) {
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(int(bits)), sel), sel));
}
#endif
}  // namespace detail

/// y[i] = a[i] + b[i] where bit i of `bits` is set, else 0, for the 16
/// elements of one mask word (y may alias a or b). Each of a, b and y is
/// float or bfloat16 bits: a bf16 operand is widened exactly, the float sum
/// rounded to bf16 for a bf16 y as host::store_bf16 rounds (the residual
/// gradients handed over in bf16: nn/sequential.hpp).
template <class A, class Bv, class Y>
inline void add_masked_word(const A* a, const Bv* b, std::uint16_t bits, Y* y) {
  static_assert(
      (std::is_same_v<A, float> || std::is_same_v<A, std::uint16_t>)&&(
          std::is_same_v<Bv, float> || std::is_same_v<Bv, std::uint16_t>)&&(std::is_same_v<Y, float> ||
                                                                            std::is_same_v<Y, std::uint16_t>),
      "add_masked_word: float or bfloat16 bits (std::uint16_t) only");
#if defined(__AVX512F__)
  detail::store16(_mm512_maskz_add_ps(__mmask16(bits), detail::load16(a), detail::load16(b)), y);
#elif defined(__AVX2__)
  // Both halves loaded before either is stored: y may alias a or b.
  const __m256 lo =
      _mm256_and_ps(_mm256_add_ps(detail::load8(a), detail::load8(b)), detail::lanes8(bits & 0xFFu));
  const __m256 hi = _mm256_and_ps(_mm256_add_ps(detail::load8(a + 8), detail::load8(b + 8)),
                                  detail::lanes8(unsigned(bits) >> 8));
  detail::store8(lo, y);
  detail::store8(hi, y + 8);
#else
  float va[16], vb[16], v[16];
  detail::load16(a, va);
  detail::load16(b, vb);
  for (int l = 0; l < 16; ++l) v[l] = keep_if(bits >> l & 1u, va[l] + vb[l]);
  detail::store16(v, y);
#endif
}

}  // namespace cifarnet::backend::host
