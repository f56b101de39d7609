// cifarnet/backend/onednn/bf16_wgrad.hpp — the bfloat16 weight gradient of a
// 2-D convolution in NHWC with AVX512-BF16's dot products (vdpbf16ps), the
// project's own kernel for CPUs that have AVX512-BF16 but no AMX (AMD's Zen
// 4): dw[i][j][c][o] = sum over n, y, x of dy[n][y][x][o] *
// x[n][sh*y+i-pt][sw*x+j-pl][c] (HWIO, float), from bf16 x and dy.
//
// Why not oneDNN's: oneDNN 2.6.3's avx512_core_bf16 backward_weights ran
// airbench94's 64 -> 256 at 15x15 (batch 500) in 113 ms on a 2-core Zen 4
// EPYC against 74 ms for that layer's forward, which does the same
// multiply-adds, and it has no bf16 kernel for strided convolutions there
// (the op ran those in float). Measured against it: docs/BENCHMARKS.md,
// 2026-12-06 13:37.
//
// How: vdpbf16ps adds the products of 16 pairs of bf16 values into 16
// floats. The pairs are two images: a block of images is copied, image m
// and m + 1 interleaved element by element, into per-thread buffers (x with
// pl zero columns before each row and pr after it, written once), so that
// one 32-bit element of the copy of x is a channel at one pixel in both
// images and one 64-byte vector of the copy of dy is 16 output channels at
// one pixel in both. Every kernel offset and stride then reads the same
// layout, with no shifts: the output pixel (y, x) meets the input pixel
// (sh*y + i - pt, sw*x + j) of the padded row; rows outside the image are
// skipped, and only the padding columns (zeros) add products that do not
// count. The products keep 24 sums in registers: eight input
// channels by three kernel columns (one output-channel vector), or for
// narrower kernels up to three output-channel vectors; per output pixel one
// vector load of dy and 24 broadcasts of x, each used once. An odd batch
// pairs its last image with zeros.
//
// Determinism: the image pairs are cut into a fixed number of chunks (a
// function of the geometry only); each chunk is summed in a fixed order
// into its own float partial, by whichever thread takes it, and the partials
// are added in chunk order. The result is the same bits for any thread count
// and on every run.
//
// Needs x86-64 with AVX-512 (F, BW, VL) and AVX512-BF16, and the OS's
// saving of the AVX-512 state (available() asks once). The kernel code is
// compiled for those instructions function by function (target
// attributes), so no global -m flag is needed; elsewhere the header
// compiles, and available() is false.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cifarnet/backend/host/unroll.hpp"
#include "cifarnet/backend/onednn/amx_tiles.hpp"
#include "cifarnet/core/error.hpp"

namespace cifarnet {
namespace backend {
namespace onednn {
namespace bf16dot {

/// CPUID reports AVX-512 (F, BW, VL) and AVX512-BF16, and the OS saves the
/// AVX-512 state. Asked once.
inline bool available() {
#if CIFARNET_AMX_X86
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((b >> 16 & 1) && (b >> 30 & 1) && (b >> 31 & 1))) return false;  // F, BW, VL
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) return false;   // OSXSAVE
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0xe6u) != 0xe6u) return false;  // SSE, AVX, opmask, ZMM state
    return amx::avx512_bf16_available();
  }();
  return ok;
#else
  return false;
#endif
}

/// The weight gradient of one convolution geometry (see the file comment).
/// Owns its scratch buffers; run() may be called any number of times, not
/// concurrently on one object.
class WeightGrad {
 public:
  /// No dilation; ic a multiple of 8 and oc of 16; any stride, kernel size
  /// and padding (also asymmetric, also >= the kernel) that leaves a
  /// non-empty output.
  static bool supported(std::size_t n, std::size_t ih, std::size_t iw, std::size_t ic, std::size_t oc,
                        std::size_t kh, std::size_t kw, std::size_t pt, std::size_t pl, std::size_t pb,
                        std::size_t pr, std::size_t sh = 1, std::size_t sw = 1) {
    if (!amx::wgrad_geometry(n, ih, iw, ic, oc, kh, kw, pt, pl, pb, pr, sh, sw)) return false;
    const std::size_t oh = (ih + pt + pb - kh) / sh + 1, ow = (iw + pl + pr - kw) / sw + 1;
    // One image pair's copies below 1 GiB each.
    constexpr std::size_t kMax = std::size_t(1) << 28;
    return ih * (iw + pl + pr) < kMax / ic && oh * ow < kMax / oc && kh * kw * ic < kMax / oc;
  }

  WeightGrad(std::size_t n, std::size_t ih, std::size_t iw, std::size_t ic, std::size_t oc, std::size_t kh,
             std::size_t kw, std::size_t pt, std::size_t pl, std::size_t pb, std::size_t pr,
             std::size_t sh = 1, std::size_t sw = 1)
      : n_(n), ih_(ih), iw_(iw), ic_(ic), oc_(oc), kh_(kh), kw_(kw), pt_(pt), pl_(pl), sh_(sh), sw_(sw) {
    if (!supported(n, ih, iw, ic, oc, kh, kw, pt, pl, pb, pr, sh, sw))
      throw BackendError(
          "bf16dot::WeightGrad: unsupported geometry (ic must be a multiple of 8, oc of 16, and the output "
          "non-empty)");
    oh_ = (ih + pt + pb - kh) / sh + 1;
    ow_ = (iw + pl + pr - kw) / sw + 1;
    wpad_ = iw + pl + pr;
    pairs_ = (n + 1) / 2;
    // Chunks: a fixed split of the pairs (the determinism); enough to share
    // among a few threads, few enough that adding the partials stays cheap.
    const std::size_t per_partial = kh * kw * ic * oc;
    nchunks_ = std::min<std::size_t>(pairs_, per_partial <= 9 * 64 * 64 ? 8 : 4);
    // Pairs per copied block: both copies within 512 KiB of L2 (half of a
    // Zen 4 core's), at least one pair; the blocks of a chunk of equal size
    // where they can be.
    const std::size_t per_pair = (ih * wpad_ * ic + oh_ * ow_ * oc) * 4;
    const std::size_t max_chunk = (pairs_ + nchunks_ - 1) / nchunks_;
    block_ = std::max<std::size_t>(1, std::min<std::size_t>((512u << 10) / per_pair, max_chunk));
    const std::size_t blocks = (max_chunk + block_ - 1) / block_;
    block_ = (max_chunk + blocks - 1) / blocks;
    if (nchunks_ > 1) partial_.assign(nchunks_ * per_partial, 0.0f);
    ensure_threads(std::size_t(omp_get_max_threads()));
  }

  /// Chunks of image pairs (each its own partial sum).
  std::size_t chunks() const { return nchunks_; }
  /// Image pairs per copied block (at most a chunk's).
  std::size_t block_pairs() const { return block_; }

  /// x: bf16 bits, NHWC [n][ih][iw][ic]; dy: bf16 bits, NHWC [n][oh][ow][oc];
  /// dw: float HWIO [kh][kw][ic][oc], overwritten.
  void run(const std::uint16_t* x, const std::uint16_t* dy, float* dw) {
#if CIFARNET_AMX_X86
    if (!available()) throw BackendError("bf16dot::WeightGrad: this CPU or OS offers no AVX512-BF16");
    ensure_threads(std::size_t(omp_get_max_threads()));
    const std::size_t per_partial = kh_ * kw_ * ic_ * oc_;
    const bool direct = nchunks_ == 1;
    float* const partial = direct ? dw : partial_.data();
#pragma omp parallel
    {
      Scratch& s = scratch_[std::size_t(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1)
      for (std::size_t c = 0; c < nchunks_; ++c) chunk(c, x, dy, partial + c * per_partial, s);
      if (!direct) {
        // Chunk partials added in chunk order, element by element.
        const std::size_t rows = kh_ * kw_ * ic_;
        const std::size_t nt = std::size_t(omp_get_num_threads()), t = std::size_t(omp_get_thread_num());
        sum_partials(partial, rows * t / nt, rows * (t + 1) / nt, dw);
      }
    }
#else
    (void)x;
    (void)dy;
    (void)dw;
    throw BackendError("bf16dot::WeightGrad: AVX512-BF16 needs x86-64");
#endif
  }

 private:
  struct Scratch {
    amx::TileBuffer xp;   // [block][ih][wpad][ic][2]: x, image pairs interleaved, zero pad columns
    amx::TileBuffer dyp;  // [block][oh][ow][oc][2]: dy, image pairs interleaved
  };

  void ensure_threads(std::size_t nt) {
    while (scratch_.size() < nt) {
      Scratch s;
      s.xp = amx::TileBuffer(block_ * ih_ * wpad_ * ic_ * 2);
      s.dyp = amx::TileBuffer(block_ * oh_ * ow_ * oc_ * 2);
      scratch_.push_back(std::move(s));
    }
  }

#if CIFARNET_AMX_X86
  std::size_t chunk_begin(std::size_t c) const { return pairs_ * c / nchunks_; }

  // Rows [lo, hi) of the partials ([kh * kw * ic][oc]) summed into dw.
  void sum_partials(const float* partial, std::size_t lo, std::size_t hi, float* dw) const {
    amx::add_partials(partial + lo * oc_, nchunks_, kh_ * kw_ * ic_ * oc_, (hi - lo) * oc_, dw + lo * oc_);
  }

  void chunk(std::size_t c, const std::uint16_t* x, const std::uint16_t* dy, float* part, Scratch& s) const {
    const std::size_t q0 = chunk_begin(c), q1 = chunk_begin(c + 1);
    bool first = true;
    for (std::size_t q = q0; q < q1; q += block_) {
      const std::size_t cnt = std::min(block_, q1 - q);
      copy(x, dy, q, cnt, s);
      products(s, cnt, part, first);
      first = false;
    }
  }

  // dst[2e] = a[e], dst[2e + 1] = b[e] (0 where b is null), e < len.
  __attribute__((target("avx512f,avx512bw,avx512vl"))) static void interleave(const std::uint16_t* a,
                                                                              const std::uint16_t* b,
                                                                              std::size_t len,
                                                                              std::uint16_t* dst) {
    // a[0], b[0], a[1], b[1], ... (b's elements are indexes 32 and up).
    alignas(64) static constexpr std::uint16_t kOrder[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                             37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                             11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i idx = _mm512_load_si512(kOrder);
    std::size_t e = 0;
    for (; e + 16 <= len; e += 16) {
      const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + e));
      const __m256i vb =
          b ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + e)) : _mm256_setzero_si256();
      _mm512_storeu_si512(dst + 2 * e, _mm512_permutex2var_epi16(_mm512_castsi256_si512(va), idx,
                                                                 _mm512_castsi256_si512(vb)));
    }
    if (e < len) {
      const unsigned m = unsigned(len - e);
      const __mmask16 lm = __mmask16((1u << m) - 1);
      const __m256i va = _mm256_maskz_loadu_epi16(lm, a + e);
      const __m256i vb = b ? _mm256_maskz_loadu_epi16(lm, b + e) : _mm256_setzero_si256();
      _mm512_mask_storeu_epi16(
          dst + 2 * e, __mmask32((1ull << (2 * m)) - 1),
          _mm512_permutex2var_epi16(_mm512_castsi256_si512(va), idx, _mm512_castsi256_si512(vb)));
    }
  }

  // Image pairs [q, q + cnt) of x and dy into the scratch buffers.
  void copy(const std::uint16_t* x, const std::uint16_t* dy, std::size_t q, std::size_t cnt,
            Scratch& s) const {
    const std::size_t xrow = iw_ * ic_, ximg = ih_ * xrow, dimg = oh_ * ow_ * oc_;
    for (std::size_t r = 0; r < cnt; ++r) {
      const std::size_t m = 2 * (q + r);
      const bool second = m + 1 < n_;
      const std::uint16_t* xa = x + m * ximg;
      const std::uint16_t* xb = second ? xa + ximg : nullptr;
      std::uint16_t* xd = s.xp.p + r * ih_ * wpad_ * ic_ * 2;
      if (wpad_ == iw_) {
        interleave(xa, xb, ximg, xd);
      } else {
        for (std::size_t y = 0; y < ih_; ++y)
          interleave(xa + y * xrow, xb ? xb + y * xrow : nullptr, xrow, xd + (y * wpad_ + pl_) * ic_ * 2);
      }
      const std::uint16_t* da = dy + m * dimg;
      interleave(da, second ? da + dimg : nullptr, dimg, s.dyp.p + r * dimg * 2);
    }
  }

  // The products of a copied block of cnt pairs added into the chunk's
  // partial (over zeros when `first`).
  void products(const Scratch& s, std::size_t cnt, float* part, bool first) const {
    for (std::size_t cb = 0; cb < ic_; cb += 8)
      for (std::size_t i = 0; i < kh_; ++i)
        for (std::size_t j0 = 0; j0 < kw_; j0 += 3) {
          const std::size_t nj = std::min<std::size_t>(3, kw_ - j0);
          for (std::size_t ob = 0; ob < oc_;) {
            const std::size_t left = (oc_ - ob) / 16;
            if (nj == 3) {
              sums<3, 1>(s, cnt, cb, ob, i, j0, part, first);
              ob += 16;
            } else if (nj == 2) {
              sums<2, 1>(s, cnt, cb, ob, i, j0, part, first);
              ob += 16;
            } else if (left >= 3) {
              sums<1, 3>(s, cnt, cb, ob, i, j0, part, first);
              ob += 48;
            } else if (left == 2) {
              sums<1, 2>(s, cnt, cb, ob, i, j0, part, first);
              ob += 32;
            } else {
              sums<1, 1>(s, cnt, cb, ob, i, j0, part, first);
              ob += 16;
            }
          }
        }
  }

  // Input channels cb..cb+7, kernel row i, kernel columns j0..j0+NJ-1,
  // output channels ob..ob+16*NO-1: 8 * NJ * NO sums over every output
  // pixel of the block whose input row exists.
  template <int NJ, int NO>
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void sums(const Scratch& s, std::size_t cnt,
                                                                            std::size_t cb, std::size_t ob,
                                                                            std::size_t i, std::size_t j0,
                                                                            float* part, bool zero) const {
    // acc[(j * 8 + c) * NO + v]: kernel column j0 + j, input channel cb + c,
    // output channels ob + 16 * v to ob + 16 * v + 15.
    constexpr int kSums = NJ * 8 * NO;
    __m512 acc[kSums];
    float* const base = part + ((i * kw_ + j0) * ic_ + cb) * oc_ + ob;
    const auto at = [&](int t) {
      const std::size_t j = std::size_t(t / (8 * NO)), c = std::size_t(t / NO % 8), v = std::size_t(t % NO);
      return base + (j * ic_ + c) * oc_ + v * 16;
    };
    CIFARNET_UNROLL(24)
    for (int t = 0; t < kSums; ++t) acc[t] = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(at(t));
    // Output rows y whose input row sh*y + i - pt lies in [0, ih).
    const std::size_t y0 = i >= pt_ ? 0 : (pt_ - i + sh_ - 1) / sh_;
    const std::size_t y1 = std::min(oh_, ih_ + pt_ > i ? (ih_ + pt_ - i - 1) / sh_ + 1 : 0);
    const std::size_t xpix = ic_ * 2, dpix = oc_ * 2, xstep = sw_ * xpix;
    for (std::size_t r = 0; r < cnt; ++r)
      for (std::size_t y = y0; y < y1; ++y) {
        const std::uint16_t* xs = s.xp.p + ((r * ih_ + (sh_ * y + i - pt_)) * wpad_ + j0) * xpix + cb * 2;
        const std::uint16_t* ds = s.dyp.p + ((r * oh_ + y) * ow_) * dpix + ob * 2;
        for (std::size_t xo = 0; xo < ow_; ++xo, xs += xstep, ds += dpix) {
          __m512bh d[NO];
          CIFARNET_UNROLL(3)
          for (int v = 0; v < NO; ++v) d[v] = reinterpret_cast<__m512bh>(_mm512_load_si512(ds + v * 32));
          // Each (column, channel) pair of the two images, broadcast.
          CIFARNET_UNROLL(24)
          for (int jc = 0; jc < NJ * 8; ++jc) {
            std::int32_t bits;
            std::memcpy(&bits, xs + std::size_t(jc / 8) * xpix + std::size_t(jc % 8) * 2, 4);
            const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi32(bits));
            CIFARNET_UNROLL(3)
            for (int v = 0; v < NO; ++v) acc[jc * NO + v] = _mm512_dpbf16_ps(acc[jc * NO + v], d[v], b);
          }
        }
      }
    CIFARNET_UNROLL(24)
    for (int t = 0; t < kSums; ++t) _mm512_storeu_ps(at(t), acc[t]);
  }
#endif

  std::size_t n_, ih_, iw_, ic_, oc_, kh_, kw_, pt_, pl_, sh_, sw_;
  std::size_t oh_ = 0, ow_ = 0, wpad_ = 0, pairs_ = 0;
  std::size_t nchunks_ = 1, block_ = 1;
  std::vector<float> partial_;
  std::vector<Scratch> scratch_;
};

}  // namespace bf16dot
}  // namespace onednn
}  // namespace backend
}  // namespace cifarnet
