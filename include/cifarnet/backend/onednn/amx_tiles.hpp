// cifarnet/backend/onednn/amx_tiles.hpp — what the project's own Intel AMX
// kernels share (amx_wgrad.hpp, amx_conv.hpp): whether the CPU and OS offer
// AMX (amx_available), and the tile instructions as inline assembly with
// the tile number a template argument.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define CIFARNET_AMX_X86 1
#else
#define CIFARNET_AMX_X86 0
#endif

namespace cifarnet {
namespace backend {
namespace onednn {
namespace amx {

#if CIFARNET_AMX_X86
namespace detail {

inline bool probe_amx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx512 = (b >> 16 & 1) && (b >> 30 & 1) && (b >> 31 & 1);  // F, BW, VL
  const bool tile = d >> 24 & 1, bf16 = d >> 22 & 1;
  if (!avx512 || !tile || !bf16) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) return false;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  // XCR0: SSE, AVX, opmask, ZMM upper halves, ZMM16-31, tile config, tile data.
  const unsigned long long xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  const unsigned long long want = 0x6 | 0xe0 | (3ull << 17);
  if ((xcr0 & want) != want) return false;
  // Linux hands out the 8 KiB tile state only on request (once per process).
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// The AMX instructions as inline assembly with the tile number an immediate
// operand, so templates can pick tiles (GCC's _tile_* macros paste the
// number's spelling). Loads name "memory" so the copies are not moved past
// them.
template <int T>
inline void tile_load(const void* p, long stride) {
  __asm__ volatile("{tileloadd\t(%0,%1,1), %%tmm%c2|tileloadd\ttmm%c2, [%0+%1*1]}" ::"r"(p), "r"(stride),
                   "i"(T)
                   : "memory");
}
template <int T>
inline void tile_store(void* p, long stride) {
  __asm__ volatile("{tilestored\t%%tmm%c2, (%0,%1,1)|tilestored\t[%0+%1*1], tmm%c2}" ::"r"(p), "r"(stride),
                   "i"(T)
                   : "memory");
}
template <int T>
inline void tile_zero() {
  __asm__ volatile("tilezero\t%%tmm%c0" ::"i"(T));
}
template <int C, int A, int B>
inline void tile_dp() {
  __asm__ volatile("{tdpbf16ps\t%%tmm%c2, %%tmm%c1, %%tmm%c0|tdpbf16ps\ttmm%c0, tmm%c1, tmm%c2}" ::"i"(C),
                   "i"(A), "i"(B));
}

/// Every tile 16 rows of 64 bytes (palette 1).
inline void tile_config() {
  alignas(64) unsigned char cfg[64] = {};
  cfg[0] = 1;
  for (int t = 0; t < 8; ++t) {
    cfg[16 + 2 * t] = 64;
    cfg[48 + t] = 16;
  }
  __asm__ volatile("ldtilecfg\t%0" ::"m"(cfg));
}
inline void tile_release() { __asm__ volatile("tilerelease" ::); }

template <class F, int... I>
inline void static_for_impl(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
/// f(integral_constant<int, 0>), ..., f(integral_constant<int, N-1>).
template <int N, class F>
inline void static_for(F&& f) {
  static_for_impl(f, std::make_integer_sequence<int, N>{});
}

}  // namespace detail
#endif

/// A batch norm's output folded into the convolution that reads it (amx_conv.hpp's
/// file comment; amx_wgrad.hpp applies it to x as well): input channel c is max(0, y * scale[c] + shift[c])
/// with `relu`, else y * scale[c] + shift[c]; one fused multiply-add in float, rounded to bf16.
struct InputMap {
  const float* scale = nullptr;
  const float* shift = nullptr;
  bool relu = true;
};

/// 64-byte aligned, zeroed storage of `count` bf16 values and 64 more (the
/// reads a tile makes past the end find zeros): what the kernels' tiles load
/// from (a tile row that is not 64-byte aligned costs several aligned ones).
struct TileBuffer {
  std::uint16_t* p = nullptr;
  TileBuffer() = default;
  explicit TileBuffer(std::size_t count) {
    p = static_cast<std::uint16_t*>(::operator new(count * 2 + 128, std::align_val_t(64)));
    std::memset(p, 0, count * 2 + 128);
  }
  TileBuffer(TileBuffer&& o) noexcept : p(o.p) { o.p = nullptr; }
  TileBuffer& operator=(TileBuffer&& o) noexcept {
    std::swap(p, o.p);
    return *this;
  }
  TileBuffer(const TileBuffer&) = delete;
  TileBuffer& operator=(const TileBuffer&) = delete;
  ~TileBuffer() {
    if (p) ::operator delete(p, std::align_val_t(64));
  }
};

/// What both own bf16 weight gradients (amx_wgrad.hpp, bf16_wgrad.hpp)
/// take before their own limits: no empty dimension, ic a multiple of 8
/// and oc of 16, kernel sizes, paddings and strides up to 4096, and a
/// non-empty output.
inline bool wgrad_geometry(std::size_t n, std::size_t ih, std::size_t iw, std::size_t ic, std::size_t oc,
                           std::size_t kh, std::size_t kw, std::size_t pt, std::size_t pl, std::size_t pb,
                           std::size_t pr, std::size_t sh, std::size_t sw) {
  if (n == 0 || ih == 0 || iw == 0 || kh == 0 || kw == 0 || ic == 0 || oc == 0 || sh == 0 || sw == 0)
    return false;
  if (ic % 8 != 0 || oc % 16 != 0) return false;
  if (kh > 4096 || kw > 4096 || pt + pb > 4096 || pl + pr > 4096 || sh > 4096 || sw > 4096) return false;
  return ih + pt + pb >= kh && iw + pl + pr >= kw;
}

/// out[i] = the sum of chunk partials p[ch * stride + i] over ch = 0 ..
/// chunks - 1, added in chunk order (the weight gradients' determinism),
/// i < count.
inline void add_partials(const float* p, std::size_t chunks, std::size_t stride, std::size_t count,
                         float* out) {
  for (std::size_t e = 0; e < count; e += 256) {
    const std::size_t m = std::min<std::size_t>(256, count - e);
    float acc[256];
    std::memcpy(acc, p + e, m * sizeof(float));
    for (std::size_t ch = 1; ch < chunks; ++ch) {
      const float* q = p + ch * stride + e;
#pragma omp simd
      for (std::size_t i = 0; i < m; ++i) acc[i] += q[i];
    }
    std::memcpy(out + e, acc, m * sizeof(float));
  }
}

/// The CPU has AVX512-BF16 (CPUID leaf 7, subleaf 1), which the kernels'
/// rounding to bf16 uses (amx_conv.hpp, and amx_wgrad.hpp's input map).
inline bool avx512_bf16_available() {
#if CIFARNET_AMX_X86
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);
  }();
  return ok;
#else
  return false;
#endif
}

/// CPUID reports AMX-TILE, AMX-BF16 and AVX-512 (F, BW, VL), the OS saves
/// their state, and Linux granted this process the tile data. Asked once.
inline bool amx_available() {
#if CIFARNET_AMX_X86
  static const bool ok = detail::probe_amx();
  return ok;
#else
  return false;
#endif
}

}  // namespace amx
}  // namespace onednn
}  // namespace backend
}  // namespace cifarnet
