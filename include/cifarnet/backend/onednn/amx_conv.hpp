// cifarnet/backend/onednn/amx_conv.hpp — the forward pass of a 3x3, stride-1,
// SAME-padded (1 on every side) convolution on Intel AMX in the project's own
// kernel: NHWC bfloat16 in and out, float sums in the tiles, with two things
// oneDNN's kernels cannot do fused into the pass:
//  - an input map (prologue): the input may be a batch norm's output that
//    was never written, given as the batch norm's input y (bf16) and its
//    per-channel scale and shift (and ReLU); the kernel computes
//    x = max(0, y * scale + shift), rounded to bf16, while it copies y into
//    its padded buffer;
//  - the statistics of the output (epilogue): each output channel's sum and
//    sum of squares of the bf16 values it writes, what the batch norm after
//    the convolution reads its output once for.
// Each is one pass over a tensor saved: the map saves the batch norm's
// apply pass (one read and one write of its output), the statistics a read
// of this output.
//
// Why not oneDNN's: oneDNN 2.6.3's bf16 forward (brgconv:avx512_core_amx_bf16)
// takes neither. ops::Conv2d::forward_bf16_mapped runs this kernel with the
// map for bn_output_into_next_conv (the statistics are not used there yet).
// On a 2-core AMX Xeon, ResNet-20's stage shapes at batch 128: with the
// statistics, 0.84x-1.17x oneDNN's convolution plus a statistics pass
// (0.84x-0.97x at 16 channels); in the ResNet-20 bf16 step, a stage-1
// pair's batch norm forward went from 0.51 to 0.12 ms and the convolution
// after it from 0.51 to 0.59 ms (docs/BENCHMARKS.md, 2026-12-05 00:05;
// docs/runs/bench/2026-12-04-amx-conv-probe/library_kernel.txt).
//
// How: images are taken in groups of kGroup, stacked into one tall padded
// image in a per-thread buffer (a zero row above each image and below the
// last, a zero column left and right of each row, row pitch pw = w + 2), so
// that the output at stacked position q reads the inputs at q + i*pw + j for
// the taps (i, j): the convolution is nine (or three) matrix products of
// shifted row blocks, with no bounds inside the loops. The output positions
// of the zero rows and columns are computed and left out (a table gives
// each position's output pixel, or none). A tile holds 16
// output positions by 16 output channels; 2x2 tiles (32 positions by 32
// channels) share each A (input) and B (weights) tile load; a 16-channel
// output runs 4x1 tiles. Input channels go to the K dimension 32 at a time;
// with 16 input channels a K row holds two neighbouring pixels, read in place
// from rows 64 bytes apart: a tile takes every other position, and the even
// ones pair taps (i, 0) and (i, 1) in one product, (i, 2) with zero weights
// for the pixel after it, the odd ones a zero for the pixel before and
// (i, 0) in one, (i, 1) and (i, 2) in the other (two weight packs; the row
// pitch is even, so every row starts at an even pixel). The weights are
// packed once per set_weights into the tiles' pair-interleaved (VNNI)
// layout. Every buffer a tile loads from is 64-byte aligned: a tile row
// that is not costs about four aligned ones (the probe's micro.cpp: 41
// against 10 cycles a load).
//
// Numerics: the products of bf16 values are exact in float, and each output
// is a float sum of them rounded once to bf16 (round to nearest even,
// VCVTNEPS2BF16, as oneDNN's bf16 outputs); the order of the sum differs from
// oneDNN's only where 16 input channels pair taps (the probe: equal bits at
// 32 and 64 channels, one bf16 unit in a few outputs at 16). The statistics
// sum the bf16 values (exactly widened) in float over each group of images in
// a fixed order, and the groups' sums in double in group order: the same bits
// for any thread count.
//
// Needs what amx_available() asks and AVX512-BF16; the AMX and AVX-512 code
// is compiled for those instructions function by function (target
// attributes), so no global -m flag is needed.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "cifarnet/backend/host/bf16.hpp"
#include "cifarnet/backend/host/prefetch.hpp"
#include "cifarnet/backend/onednn/amx_tiles.hpp"
#include "cifarnet/core/error.hpp"

namespace cifarnet {
namespace backend {
namespace onednn {
namespace amx {

/// The forward pass of one geometry (see the file comment). Owns its packed
/// weights and scratch; run() may be called any number of times, not
/// concurrently on one object.
class Forward3x3 {
 public:
  /// Images stacked per pass (and per statistics partial).
  static constexpr std::size_t kGroup = 8;

  /// Why the kernel does not take this geometry, in words; empty when it
  /// does: 16 input channels or a multiple of 32, 16 output channels or a
  /// multiple of 32, a non-empty image, a CPU with AMX and AVX512-BF16.
  static std::string why_not(std::size_t n, std::size_t h, std::size_t w, std::size_t ic, std::size_t oc) {
    if (n == 0 || h == 0 || w == 0) return "an empty batch or image";
    if (ic != 16 && (ic == 0 || ic % 32 != 0)) return "input channels neither 16 nor a multiple of 32";
    if (oc != 16 && (oc == 0 || oc % 32 != 0)) return "output channels neither 16 nor a multiple of 32";
    if (h > 4096 || w > 4096 || ic > 4096 || oc > 4096) return "a dimension above 4096";
    if (!amx_available()) return "no AMX on this CPU or OS";
    if (!avx512_bf16_available()) return "no AVX512-BF16 on this CPU";
    return {};
  }

  Forward3x3(std::size_t n, std::size_t h, std::size_t w, std::size_t ic, std::size_t oc)
      : n_(n), h_(h), w_(w), ic_(ic), oc_(oc) {
    const std::string why = why_not(n, h, w, ic, oc);
    if (!why.empty()) throw BackendError("amx::Forward3x3: " + why);
    // 16 input channels: an even row pitch (an extra zero column where w is
    // odd), so that every tile row of block_pairs starts 64-byte aligned.
    pw_ = ic == 16 ? ((w + 3) & ~std::size_t(1)) : w + 2;
    taps_ = ic == 16 ? 3 : 9;
    kb_ = ic == 16 ? 2 : ic / 32;
    ocb_ = oc / 16;
    groups_ = (n + kGroup - 1) / kGroup;
    // Positions of a group's stacked image, and the reads past its end (the
    // last tile's rows, the taps' shifts, a 16-channel row's second pixel).
    positions_ = ((kGroup * (h + 1) + 1) + 2) * pw_ + 64;
    pack_ = std::size_t(taps_) * kb_ * ocb_ * 512;
    wp_ = TileBuffer(pack_ * (ic == 16 ? 2 : 1));
    partial_.assign(groups_ * 2 * oc, 0.0f);
    // Each stacked position's output pixel in its group (m * h * w + y * w
    // + x), or -1 for the zero rows and columns and past the end.
    const std::size_t npos = kGroup * (h + 1) * pw_;
    out_of_.assign(npos + 64, -1);
    for (std::size_t q = 0; q < npos; ++q) {
      const std::size_t r = q / pw_, c = q % pw_, m = r / (h + 1), yy = r % (h + 1);
      if (yy < h && c < w) out_of_[q] = std::int32_t((m * h + yy) * w + c);
    }
  }

  /// w: float HWIO [3][3][ic][oc], rounded to bf16 (nearest even) and packed.
  /// Every training step calls it (the weights move): the taps are shared
  /// among the threads (the main thread alone kept the other waiting:
  /// docs/BENCHMARKS.md, 2026-12-05 07:40).
  void set_weights(const float* w) {
    std::uint16_t* p = wp_.p;
    const long taps = long(taps_);
#pragma omp parallel for schedule(static) if (kb_ * ocb_ >= 2)
    for (long tl = 0; tl < taps; ++tl) {
      const std::size_t t = std::size_t(tl);
      for (std::size_t k = 0; k < kb_; ++k)
        for (std::size_t nb = 0; nb < ocb_; ++nb)
          for (std::size_t pr = 0; pr < 16; ++pr)
            for (std::size_t o = 0; o < 16; ++o)
              for (std::size_t e = 0; e < 2; ++e) {
                const std::size_t kk = k * 32 + 2 * pr + e;  // the K index in the tap's row
                const std::size_t at = (((t * kb_ + k) * ocb_ + nb) * 16 + pr) * 32 + o * 2 + e;
                float v = 0.0f;
                if (ic_ == 16) {
                  // The even pack: pixels q .. q + 3 of tap row t for an even
                  // position q (columns 0, 1 / 2 and a zero); the odd pack:
                  // pixels q - 1 .. q + 2 for an odd one (a zero, column 0 /
                  // 1, 2).
                  if (kk < 48) v = w[((t * 3 + kk / 16) * ic_ + kk % 16) * oc_ + nb * 16 + o];
                  const float odd =
                      kk >= 16 ? w[((t * 3 + kk / 16 - 1) * ic_ + kk % 16) * oc_ + nb * 16 + o] : 0.0f;
                  p[pack_ + at] = host::bf16_bits(odd);
                } else {
                  v = w[(t * ic_ + kk) * oc_ + nb * 16 + o];
                }
                p[at] = host::bf16_bits(v);
              }
    }
    weights_ = true;
  }

  /// x: bf16 bits NHWC [n][h][w][ic] (with `map`: the batch norm's input y);
  /// y: bf16 bits NHWC [n][h][w][oc], overwritten; stats: nullptr or double
  /// [2][oc], overwritten with each channel's sum and sum of squares of y.
  void run(const std::uint16_t* x, const InputMap* map, std::uint16_t* y, double* stats) {
    if (!weights_) throw BackendError("amx::Forward3x3: run before set_weights");
    if (map && (!map->scale || !map->shift))
      throw BackendError("amx::Forward3x3: an input map without scale or shift");
    stats_ = stats != nullptr;
#if CIFARNET_AMX_X86
    const std::size_t nt = std::size_t(omp_get_max_threads());
    while (scratch_.size() < nt) scratch_.emplace_back(positions_ * std::size_t(ic_ == 16 ? 16 : ic_));
#pragma omp parallel
    {
      detail::tile_config();
      TileBuffer& P = scratch_[std::size_t(omp_get_thread_num())];
#pragma omp for schedule(static, 1)
      for (std::size_t g = 0; g < groups_; ++g) group(g, x, map, y, P.p);
      detail::tile_release();
    }
    if (stats)
      for (std::size_t c = 0; c < 2 * oc_; ++c) {
        double s = 0.0;
        for (std::size_t g = 0; g < groups_; ++g) s += double(partial_[g * 2 * oc_ + c]);
        stats[c] = s;
      }
#else
    (void)x;
    (void)map;
    (void)y;
    (void)stats;
    throw BackendError("amx::Forward3x3: AMX needs x86-64");
#endif
  }

 private:
#if CIFARNET_AMX_X86
  // One group of images: stacked into P, then every tile block over it.
  void group(std::size_t g, const std::uint16_t* x, const InputMap* map, std::uint16_t* y, std::uint16_t* P) {
    const std::size_t m0 = g * kGroup, cnt = std::min(kGroup, n_ - m0);
    stack(x + m0 * h_ * w_ * ic_, cnt, map, P);
    float* part = partial_.data() + g * 2 * oc_;
    std::fill(part, part + 2 * oc_, 0.0f);
    const std::size_t mtiles = (cnt * (h_ + 1) * pw_ + 15) / 16;
    std::uint16_t* yg = y + m0 * h_ * w_ * oc_;
    if (ic_ == 16 && ocb_ == 1) {
      const std::size_t runs = (cnt * (h_ + 1) * pw_ + 63) / 64;
      for (std::size_t r = 0; r < runs; ++r) block_pairs(P, yg, part, r, cnt);
    } else if (ocb_ == 1) {
      for (std::size_t mt = 0; mt < mtiles; mt += 4) block<4, 1>(P, yg, part, mt, 0, mtiles, cnt);
    } else {
      for (std::size_t nb = 0; nb < ocb_; nb += 2)
        for (std::size_t mt = 0; mt < mtiles; mt += 2) block<2, 2>(P, yg, part, mt, nb, mtiles, cnt);
    }
  }

  // cnt images into the stacked layout, through the map if there is one. The
  // zero rows and columns were written at allocation and are never written
  // again (every group writes the same data positions; a shorter last group
  // leaves stale images after its end, which only outputs it discards read).
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void stack(const std::uint16_t* x,
                                                                             std::size_t cnt,
                                                                             const InputMap* map,
                                                                             std::uint16_t* P) const {
    const std::size_t ic = ic_, w = w_;
    for (std::size_t m = 0; m < cnt; ++m)
      for (std::size_t r = 0; r < h_; ++r) {
        std::uint16_t* dst = P + ((m * (h_ + 1) + r + 1) * pw_ + 1) * ic;
        const std::uint16_t* src = x + (m * h_ + r) * w * ic;
        host::prefetch_lines_ahead(src, w * ic * 2);  // x comes from memory
        if (!map) {
          std::memcpy(dst, src, w * ic * 2);
          continue;
        }
        const __m512 zero = _mm512_setzero_ps();
        for (std::size_t c0 = 0; c0 < ic; c0 += 16) {
          const __m512 a = _mm512_loadu_ps(map->scale + c0), b = _mm512_loadu_ps(map->shift + c0);
          for (std::size_t p = 0; p < w; ++p) {
            const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + p * ic + c0));
            const __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
            __m512 v = _mm512_fmadd_ps(f, a, b);
            if (map->relu) v = _mm512_max_ps(v, zero);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + p * ic + c0),
                                reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
          }
        }
      }
  }

  // Tiles for MT position tiles from mt0 by NT output-channel blocks from
  // nb0. Tiles: C 0..MT*NT-1, then two for A (alternating), then NT for B.
  // A position tile past the last (MT does not divide mtiles) repeats the
  // last one's loads and is not stored.
  template <int MT, int NT>
  void block(const std::uint16_t* A, std::uint16_t* y, float* part, std::size_t mt0, std::size_t nb0,
             std::size_t mtiles, std::size_t cnt) const {
    using detail::static_for;
    constexpr int kA = MT * NT, kB = kA + 2;
    static_assert(kB + NT <= 8, "eight tiles");
    const bool narrow = ic_ == 16;
    const long astride = narrow ? 32 : long(ic_) * 2;
    static_for<MT * NT>([&](auto c) { detail::tile_zero<decltype(c)::value>(); });
    for (std::size_t t = 0; t < taps_; ++t) {
      const std::size_t toff = narrow ? t * pw_ : (t / 3) * pw_ + t % 3;
      for (std::size_t k = 0; k < kb_; ++k) {
        const std::uint16_t* B = wp_.p + ((t * kb_ + k) * ocb_ + nb0) * 512;
        static_for<NT>(
            [&](auto v) { detail::tile_load<kB + decltype(v)::value>(B + decltype(v)::value * 512, 64); });
        static_for<MT>([&](auto u) {
          constexpr int ua = decltype(u)::value, areg = kA + ua % 2;
          const std::size_t mt = std::min(mt0 + std::size_t(ua), mtiles - 1);
          const std::uint16_t* a =
              narrow ? A + (mt * 16 + toff + 2 * k) * 16 : A + (mt * 16 + toff) * ic_ + k * 32;
          detail::tile_load<areg>(a, astride);
          static_for<NT>([&](auto v) {
            constexpr int va = decltype(v)::value;
            detail::tile_dp<ua * NT + va, areg, kB + va>();
          });
        });
      }
    }
    alignas(64) float buf[16 * 16];
    static_for<MT>([&](auto u) {
      constexpr int ua = decltype(u)::value;
      static_for<NT>([&](auto v) {
        constexpr int va = decltype(v)::value;
        detail::tile_store<ua * NT + va>(buf, 64);
        const std::size_t mt = mt0 + std::size_t(ua);
        if (mt >= mtiles) return;
        if (stats_)
          epilogue<true>(buf, mt * 16, nb0 + std::size_t(va), y, part, cnt);
        else
          epilogue<false>(buf, mt * 16, nb0 + std::size_t(va), y, part, cnt);
      });
    });
  }

  // 16 input and 16 output channels: the 64 positions from 64 * r in four
  // tiles, the even positions of each 32 (2 apart) and the odd ones, so that
  // every A row starts at an even pixel, 64-byte aligned (the pitch is even):
  // an even position q reads pixels q, q + 1 / q + 2, q + 3 of each tap row
  // with the even pack, an odd one q - 1, q / q + 1, q + 2 with the odd pack
  // (block<4, 1>'s rows, 32 bytes apart, cross a cache line every other row:
  // its tile products took 0.21-0.23 ms against these 0.155-0.165 for
  // ResNet's 16 -> 16 at 32x32, batch 128, 2 threads, without the copy and
  // the epilogue; the whole kernel as the step runs it, with the batch
  // norm's map, 0.40-0.42 -> 0.36-0.37 ms warm, 0.54-0.65 -> 0.54-0.61 with
  // its data evicted; docs/BENCHMARKS.md, 2026-12-05 15:28). Positions past
  // the last read the zero rows and the slack at the end of P and are not
  // stored.
  void block_pairs(const std::uint16_t* A, std::uint16_t* y, float* part, std::size_t r,
                   std::size_t cnt) const {
    using detail::static_for;
    static_for<4>([&](auto c) { detail::tile_zero<decltype(c)::value>(); });
    for (std::size_t t = 0; t < 3; ++t)
      for (std::size_t k = 0; k < 2; ++k) {
        const std::uint16_t* B = wp_.p + (t * 2 + k) * 512;
        detail::tile_load<6>(B, 64);
        detail::tile_load<7>(B + pack_, 64);
        static_for<4>([&](auto u) {
          constexpr int ua = decltype(u)::value, odd = ua % 2;
          const std::size_t px = r * 64 + (ua / 2) * 32 + t * pw_ + 2 * k;  // even
          detail::tile_load<4 + odd>(A + px * 16, 64);
          detail::tile_dp<ua, 4 + odd, 6 + odd>();
        });
      }
    alignas(64) float buf[4 * 16 * 16];
    static_for<4>([&](auto u) {
      constexpr int ua = decltype(u)::value;
      detail::tile_store<ua>(buf + ua * 256, 64);
    });
    if (stats_)
      epilogue_pairs<true>(buf, r * 64, y, part, cnt);
    else
      epilogue_pairs<false>(buf, r * 64, y, part, cnt);
  }

  // block_pairs' four stored tiles (even and odd positions of q0 .. q0 + 31,
  // then of the next 32): position q and q + 1 side by side, rounded to bf16
  // together and stored as one 64-byte row where they are neighbouring
  // output pixels; with Stats their values added to the group's sums. (The
  // tiles' rows stored one tile at a time write every other half line of y:
  // with them the parity-split kernel was no faster than block<4, 1>, the
  // same probe.)
  template <bool Stats>
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void epilogue_pairs(
      const float* buf, std::size_t q0, std::uint16_t* y, float* part, std::size_t cnt) const {
    __m512 s = _mm512_setzero_ps(), ss = _mm512_setzero_ps();
    const std::int32_t* out = out_of_.data() + q0;
    const std::uint32_t end = std::uint32_t(cnt * h_ * w_);  // the group's pixels (-1 is past it too)
    for (int half = 0; half < 2; ++half) {
      const float* even = buf + half * 512;
      const float* odd = even + 256;
      for (int i = 0; i < 16; ++i) {
        const std::uint32_t oe = std::uint32_t(out[half * 32 + 2 * i]),
                            oo = std::uint32_t(out[half * 32 + 2 * i + 1]);
        const bool ke = oe < end, ko = oo < end;
        if (!ke && !ko) continue;
        // [even | odd] in bf16: _mm512_cvtne2ps_pbh puts its second operand low.
        const __m512i both = reinterpret_cast<__m512i>(
            _mm512_cvtne2ps_pbh(_mm512_load_ps(odd + i * 16), _mm512_load_ps(even + i * 16)));
        if (ke && ko && oo == oe + 1) {
          _mm512_storeu_si512(y + std::size_t(oe) * 16, both);
        } else {
          if (ke)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + std::size_t(oe) * 16),
                                _mm512_castsi512_si256(both));
          if (ko)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + std::size_t(oo) * 16),
                                _mm512_extracti64x4_epi64(both, 1));
        }
        if constexpr (Stats) {
          const __m512i lo = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(both));
          const __m512i hi = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(both, 1));
          const __m512 fe = ke ? _mm512_castsi512_ps(_mm512_slli_epi32(lo, 16)) : _mm512_setzero_ps();
          const __m512 fo = ko ? _mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)) : _mm512_setzero_ps();
          s = _mm512_add_ps(s, _mm512_add_ps(fe, fo));
          ss = _mm512_fmadd_ps(fe, fe, _mm512_fmadd_ps(fo, fo, ss));
        }
      }
    }
    if constexpr (Stats) {
      _mm512_storeu_ps(part, _mm512_add_ps(_mm512_loadu_ps(part), s));
      _mm512_storeu_ps(part + 16, _mm512_add_ps(_mm512_loadu_ps(part + 16), ss));
    } else {
      (void)part;
    }
  }

  // One stored tile (16 positions from q0 by 16 channels from 16 * nb): the
  // positions that are outputs rounded to bf16 into y, with Stats their
  // values added to the group's sums.
  template <bool Stats>
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void epilogue(const float* buf,
                                                                                std::size_t q0,
                                                                                std::size_t nb,
                                                                                std::uint16_t* y, float* part,
                                                                                std::size_t cnt) const {
    __m512 s = _mm512_setzero_ps(), ss = _mm512_setzero_ps();
    const std::int32_t* out = out_of_.data() + q0;
    const std::uint32_t end = std::uint32_t(cnt * h_ * w_);  // the group's pixels (-1 is past it too)
    std::uint16_t* yb = y + nb * 16;
    for (int i = 0; i < 16; ++i) {
      const std::uint32_t o = std::uint32_t(out[i]);
      if (o >= end) continue;
      const __m256i bits = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_load_ps(buf + i * 16)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(yb + std::size_t(o) * oc_), bits);
      if constexpr (Stats) {
        const __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
        s = _mm512_add_ps(s, f);
        ss = _mm512_fmadd_ps(f, f, ss);
      }
    }
    if constexpr (Stats) {
      _mm512_storeu_ps(part + nb * 16, _mm512_add_ps(_mm512_loadu_ps(part + nb * 16), s));
      _mm512_storeu_ps(part + oc_ + nb * 16, _mm512_add_ps(_mm512_loadu_ps(part + oc_ + nb * 16), ss));
    } else {
      (void)part;
    }
  }
#endif

  std::size_t n_, h_, w_, ic_, oc_;
  std::size_t pack_ = 0;  // one weight pack's elements (16 input channels: the odd pack after it)
  std::size_t pw_ = 0, taps_ = 0, kb_ = 0, ocb_ = 0, groups_ = 0, positions_ = 0;
  TileBuffer wp_;  // [tap][k][nb][16 pair rows][16][2], with 16 input channels twice (even, odd)
  bool weights_ = false;
  std::vector<float> partial_;        // [group][2][oc]
  std::vector<std::int32_t> out_of_;  // each stacked position's output pixel in its group, or -1
  bool stats_ = false;                // this run sums the statistics
  std::vector<TileBuffer> scratch_;
};

}  // namespace amx
}  // namespace onednn
}  // namespace backend
}  // namespace cifarnet
