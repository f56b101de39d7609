// cifarnet/backend/onednn/amx_wgrad.hpp — the bfloat16 weight gradient of a
// 2-D convolution in NHWC on Intel AMX, in the project's own kernel:
// dw[i][j][c][o] = sum over n, y, x of dy[n][y][x][o] *
// x[n][sh*y+i-pt][sw*x+j-pl][c] (HWIO, float), from bf16 x and dy.
//
// Why not oneDNN's: oneDNN 2.6.3 has no AMX (brgemm) kernel for this pass. Its
// bf16 backward_weights ran ResNet-20's 3x3 convolutions at batch 128 in 0.7 to
// 1.1 ms on a 2-core AMX Xeon, 1.5x to 4x slower than their forward passes,
// which do the same number of multiply-adds.
//
// How: one matrix product per kernel offset (i, j), dW_ij^T[c][o] = sum over
// input pixels k of x[k][c] * dy[k - shift_ij][o], with x as the AMX A
// operand (one row per input channel, pixels contiguous) and dy as B (pairs
// of pixels interleaved per output channel, the VNNI layout). A block of
// images is first copied into both layouts, into per-thread buffers that
// stay in L2: x transposed into per-channel rows in which every image row is
// followed by max(pl, pr) zero columns and every image by max(pt, pb) zero
// rows, and dy spread over the same row pitch, with zeros in the columns and
// rows that do not exist. In that layout the output pixel over input pixel k
// at offset (i, j) is k - (i*pitch + j) for every k, and the zero gaps give
// the padding. The shift goes to dy, not x, because a tile load that is not
// 64-byte aligned costs about six aligned ones (measured): the x tiles load
// at multiples of 32 pixels, and dy is copied twice, paired from even and
// from odd pixels, so that every offset's dy tile starts on a pair row too.
// The gaps are written once, at construction; a copy writes only the data.
// A strided convolution is the sum of stride-1 ones over the phases of x
// (polyphase): with stride 2, the kernel offsets of even rows and columns
// read the image of x's even rows and columns, and so on (for ResNet's 3x3
// with padding 1 the four phases take 2x2, 2x1, 1x2 and 1x1 of the nine
// offsets). Each phase in use is copied (gathered) into its own transposed
// buffer in the one layout that dy's copy has too, so that dy is copied
// once and every offset is a shift, as above (see layout()). On a 2-core AMX
// Xeon, batch 128, ResNet-20's two stride-2 3x3 convolutions (16 -> 32 at
// 32x32 and 32 -> 64 at 16x16, padding 1) took 0.63 / 0.64 and 0.41 / 0.50
// ms this way against 0.85 / 0.75 and 1.15 / 1.04 ms in oneDNN 2.6.3's bf16
// backward_weights (conv_passes_bench, medians of 7 calls, the two builds
// alternated twice, both with the rounding of a float dy; docs/BENCHMARKS.md
// 2026-11-27 17:40). The padded phase planes are 17x17 there: 89 % of the
// positions are pixels.
// Input channels come in blocks of 16 (the tiles' rows): where ic is a
// multiple of 8 but not of 16 (airbench94's 24 -> 64), the last block's
// missing rows are zeros in the copy, their products are left out of dw,
// and the padded input channels cost their share of the products.
// The copies are AVX-512 (a 32-pixel by 16-channel transpose in unpack
// steps, an interleave for dy). The products accumulate in float in AMX
// tiles. A stride-1 convolution keeps the tiles of up to six offsets in tile
// registers over a whole block of images, for each 16 x 16 block of input
// by output channels, all sharing each x tile; its offsets are grouped by
// the parity of their dy shift, so that a group's dy tiles come from one
// copy of dy, a few lines apart (from L1 after the first). Strided
// convolutions run 2x2 tiles (32 input by 32 output channels) of one offset
// over 512 positions and store and reload them around that (a tile group
// switch costs about 10 tile products, so the stretch is long).
//
// Determinism: the pixels are cut into a fixed number of chunks of whole
// images (a function of the geometry only); each chunk is summed in a fixed
// order into its own float partial, by whichever thread takes it, and the
// partials are added in chunk order. The result is the same bits for any
// thread count and on every run.
//
// Needs x86-64 with AMX-TILE, AMX-BF16 and AVX-512BW, and Linux's permission
// for the tile data (amx_available() asks once). The AMX and AVX-512 code is
// compiled for those instructions function by function (target attributes),
// so no global -m flag is needed; elsewhere the header compiles, and
// amx_available() is false.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/backend/host/prefetch.hpp"
#include "cifarnet/backend/host/unroll.hpp"
#include "cifarnet/backend/onednn/amx_tiles.hpp"
#include "cifarnet/core/error.hpp"

namespace cifarnet {
namespace backend {
namespace onednn {
namespace amx {

/// The weight gradient of one stride-1, undilated convolution geometry (see
/// the file comment). Owns its scratch buffers; run() may be called any
/// number of times, not concurrently on one object.
class WeightGrad {
 public:
  /// No dilation; ic a multiple of 8 and oc of 16; any stride, any kernel size and
  /// any padding (also asymmetric, also >= the kernel) that leaves a
  /// non-empty output; a padded image plane below 2^24 pixels.
  static bool supported(std::size_t n, std::size_t ih, std::size_t iw, std::size_t ic, std::size_t oc,
                        std::size_t kh, std::size_t kw, std::size_t pt, std::size_t pl, std::size_t pb,
                        std::size_t pr, std::size_t sh = 1, std::size_t sw = 1) {
    if (!wgrad_geometry(n, ih, iw, ic, oc, kh, kw, pt, pl, pb, pr, sh, sw)) return false;
    // Indices into the per-channel rows stay well inside int range.
    const Layout l = layout(ih, iw, kh, kw, pt, pl, pb, pr, sh, sw);
    return l.pitch * l.rows < (std::size_t(1) << 24) && ic * oc * kh * kw < (std::size_t(1) << 28);
  }

  WeightGrad(std::size_t n, std::size_t ih, std::size_t iw, std::size_t ic, std::size_t oc, std::size_t kh,
             std::size_t kw, std::size_t pt, std::size_t pl, std::size_t pb, std::size_t pr,
             std::size_t sh = 1, std::size_t sw = 1)
      : n_(n),
        ih_(ih),
        iw_(iw),
        ic_(ic),
        icp_(round_up(ic, 16)),
        oc_(oc),
        kh_(kh),
        kw_(kw),
        sh_(sh),
        sw_(sw) {
    if (!supported(n, ih, iw, ic, oc, kh, kw, pt, pl, pb, pr, sh, sw))
      throw BackendError("amx::WeightGrad: unsupported geometry (ic must be a multiple of 8, oc of 16)");
    Layout l = layout(ih, iw, kh, kw, pt, pl, pb, pr, sh, sw);
    oh_ = l.oh;
    ow_ = l.ow;
    pitch_ = l.pitch;
    rows_ = l.rows;
    plane_ = rows_ * pitch_;
    base_ = l.base;
    reach_ = l.reach;
    phases_ = std::move(l.phases);
    offs_ = std::move(l.offs);
    // Chunks: a fixed split of the batch (the determinism), enough of them to
    // share among a few threads, few enough that adding the partials stays
    // cheap next to the products (and that wider channels get blocks of 16
    // images: measured faster than 8 at 32 -> 32).
    const std::size_t per_partial = kh * kw * icp_ * oc;
    nchunks_ = std::min<std::size_t>(n, per_partial <= 9 * 16 * 16 ? 16 : 8);
    // Images per copied block: both copies of a block within ~640 KiB of L2,
    // or up to 1 MiB where that gives fewer than 1,024 input positions, for
    // a longer run of products between two loads of the C tiles (on a 2-core
    // AMX Xeon, batch 500, runs over whole blocks: 256 -> 256 at 7x7 took
    // 17.3 ms with 1 MiB blocks against 20.8 ms with 640 KiB; 64 -> 64 at
    // 15x15, 3.93 against 3.97 ms; docs/runs/bench/2026-12-04-cd1e990-amx-wgrad/
    // probes/wg_probe.txt).
    const std::size_t per_image = (phases_.size() * icp_ + oc) * plane_ * 2;
    std::size_t fit = (640u << 10) / per_image;
    if (fit * plane_ < 1024)
      fit = std::max(fit, std::min((std::size_t(1) << 20) / per_image, 1024 / plane_ + 1));
    // The blocks of a chunk of equal size where they can be (16 images as 8
    // and 8, not 11 and 5): a shorter block zeroes the tail of the buffers,
    // 9 % of stride-2 16 -> 32's time on one core of a 2-core AMX Xeon.
    block_ = std::max<std::size_t>(1, std::min<std::size_t>(fit, max_chunk_images()));
    const std::size_t blocks = (max_chunk_images() + block_ - 1) / block_;
    block_ = (max_chunk_images() + blocks - 1) / blocks;
    kx_ = round_up(block_ * plane_ + reach_, 32);
    // x rows: every input pixel a pixel of the block can meet, and the
    // top-left padding of the first image.
    xrow_ = round_up(std::max(kx_, base_ + block_ * plane_), 32);
    if ((xrow_ / 32) % 2 == 0) xrow_ += 32;  // an odd number of cache lines between channel rows
    pre_ = reach_ / 2 + 1;
    dyrows_ = pre_ + kx_ / 2 + 16;
    // Stride 1: the offsets in groups that share each x tile (see products()).
    grouped_ = phases_.size() == 1;
    if (grouped_) {
      // Offsets whose dy shifts have the same parity read the same copy of
      // dy, rows a few cache lines apart: grouped, their dy tiles come from
      // L1 after the first.
      std::stable_sort(offs_.begin(), offs_.end(),
                       [](const Offset& a, const Offset& b) { return a.off % 2 < b.off % 2; });
      for (std::size_t s0 = 0; s0 < offs_.size();) {
        std::size_t end = s0;
        while (end < offs_.size() && offs_[end].off % 2 == offs_[s0].off % 2) ++end;
        const std::size_t ng = (end - s0 + 5) / 6;  // at most six offsets a group
        for (std::size_t g = 0; g < ng; ++g)
          groups_.push_back({s0 + (end - s0) * g / ng, (end - s0) * (g + 1) / ng - (end - s0) * g / ng});
        s0 = end;
      }
    }
    // Tile groups (measured on a 2-core Sapphire Rapids): stride 1 keeps the
    // tiles of a group of offsets over the whole block (at most 1 MiB of
    // copies, in L2); until 2026-12-06, 16 -> 16 grouped its offsets in
    // their order (five and four) and wider ones ran 2x2 tiles of one offset
    // there (see docs/runs/bench/2026-12-06-wgrad-offset-groups/);
    // strided ones run 2x2 tiles over 512 positions: 256 -> 256 at 7x7, batch
    // 500, 640 KiB blocks, took 20.8 ms so against 25.7 ms with 512 positions
    // per run (the C tiles stored and reloaded between runs), while
    // ResNet-20's stride-2 16 -> 32 took 0.398-0.404 ms so against
    // 0.387-0.392 (its 32 -> 64 went the other way, 0.276-0.286 against
    // 0.295-0.307; the same probe, wg_probe.txt): strided ones as before.
    ksub_ = grouped_ ? kx_ : 512;
    partial_.assign(nchunks_ * per_partial, 0.0f);
    ensure_threads(std::size_t(omp_get_max_threads()));
  }

  std::size_t chunks() const { return nchunks_; }
  /// Images per copied block (at most a chunk's).
  std::size_t block_images() const { return block_; }

  /// x: bf16 bits, NHWC [n][ih][iw][ic]; dy: bf16 bits, NHWC [n][oh][ow][oc];
  /// dw: float HWIO [kh][kw][ic][oc], overwritten.
  void run(const std::uint16_t* x, const std::uint16_t* dy, float* dw) { run(x, nullptr, dy, dw); }
  /// run() with x given as a batch norm's input and its map (InputMap,
  /// the input of a convolution whose batch norm output was never
  /// written): the copy of x computes each element the way
  /// amx::Forward3x3 does. Needs AVX512-BF16 (amx_conv.hpp) with a map.
  void run(const std::uint16_t* x, const InputMap* map, const std::uint16_t* dy, float* dw) {
#if CIFARNET_AMX_X86
    if (!amx_available()) throw BackendError("amx::WeightGrad: this CPU or OS offers no AMX");
    if (map && (!map->scale || !map->shift))
      throw BackendError("amx::WeightGrad: an input map without scale or shift");
    if (map && !avx512_bf16_available())
      throw BackendError("amx::WeightGrad: an input map needs AVX512-BF16");
    ensure_threads(std::size_t(omp_get_max_threads()));
    const std::size_t per_partial = kh_ * kw_ * icp_ * oc_;
    // Straight into dw when one chunk and no padded input channels.
    const bool direct = nchunks_ == 1 && icp_ == ic_;
    float* const partial = direct ? dw : partial_.data();
#pragma omp parallel
    {
      detail::tile_config();
      Scratch& s = scratch_[std::size_t(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1)
      for (std::size_t c = 0; c < nchunks_; ++c) chunk(c, x, map, dy, partial + c * per_partial, s);
      detail::tile_release();
      if (!direct) {
        // Chunk partials added in chunk order, element by element, each
        // row of oc outputs of a real input channel into its place in dw.
        const std::size_t rows = kh_ * kw_ * icp_;
        const std::size_t nt = std::size_t(omp_get_num_threads()), t = std::size_t(omp_get_thread_num());
        sum_partials(partial, rows * t / nt, rows * (t + 1) / nt, dw);
      }
    }
#else
    (void)x;
    (void)map;
    (void)dy;
    (void)dw;
    throw BackendError("amx::WeightGrad: AMX needs x86-64");
#endif
  }

 private:
  static std::size_t round_up(std::size_t v, std::size_t m) { return (v + m - 1) / m * m; }

  // A strided convolution is a sum of stride-1 ones (polyphase): kernel row
  // i reads input row s*y + a (a = i - pt), which is row y + fa of the phase
  // image of rows p, p + s, p + 2s, ... (a = s*fa + p, 0 <= p < s); likewise
  // for columns. Each phase in use gets its own transposed copy of x, all in
  // one layout (pitch, rows, base) that is also dy's: phase pixel (m, Y, X)
  // at base + m*plane + Y*pitch + X, dy pixel (m, y, x) at m*plane +
  // y*pitch + x, so that offset (i, j) pairs x at k with dy at k - off, off =
  // base + fa*pitch + fb, in every phase. The pitch and rows leave zero gaps
  // wide enough that no pair wraps into another row or image: a phase column
  // X meets dy column X - fb, which must be a gap column unless in [0, ow).
  // Stride 1 is the one phase (p, q) = (0, 0), the image itself, and the
  // layout of the stride-1 kernel (base = pt*pitch + pl).
  struct Phase {
    std::size_t p, q, hp, wp;  // its first row and column in x, its size
  };
  struct Offset {
    std::size_t buf, off, out;  // the phase's copy of x, the dy shift, kernel offset i*kw + j
  };
  struct Layout {
    std::size_t oh = 0, ow = 0, pitch = 0, rows = 0, base = 0, reach = 0;
    std::vector<Phase> phases;  // the phases in use
    std::vector<Offset> offs;   // by phase, then kernel offset
  };
  static Layout layout(std::size_t ih, std::size_t iw, std::size_t kh, std::size_t kw, std::size_t pt,
                       std::size_t pl, std::size_t pb, std::size_t pr, std::size_t sh, std::size_t sw) {
    Layout l;
    l.oh = (ih + pt + pb - kh) / sh + 1;
    l.ow = (iw + pl + pr - kw) / sw + 1;
    const auto split = [](long a, long s) {  // (floor(a / s), a mod s)
      const long f = a >= 0 ? a / s : -((-a + s - 1) / s);
      return std::make_pair(f, a - f * s);
    };
    const auto phase_size = [](std::size_t len, std::size_t first, std::size_t s) {
      return len > first ? (len - first + s - 1) / s : 0;
    };
    long fa_min = 0, fa_max = 0, fb_min = 0, fb_max = 0;
    std::vector<long> phase_of(sh * sw, -1);
    struct Tap {
      long fa, fb;
      std::size_t phase, out;
    };
    std::vector<Tap> taps;
    for (std::size_t i = 0; i < kh; ++i)
      for (std::size_t j = 0; j < kw; ++j) {
        const auto [fa, p] = split(long(i) - long(pt), long(sh));
        const auto [fb, q] = split(long(j) - long(pl), long(sw));
        if (taps.empty()) fa_min = fa_max = fa, fb_min = fb_max = fb;
        fa_min = std::min(fa_min, fa), fa_max = std::max(fa_max, fa);
        fb_min = std::min(fb_min, fb), fb_max = std::max(fb_max, fb);
        const std::size_t ph = std::size_t(p) * sw + std::size_t(q);
        phase_of[ph] = 0;
        taps.push_back({fa, fb, ph, i * kw + j});
      }
    long hmax = 0, wmax = 0;
    for (std::size_t ph = 0; ph < sh * sw; ++ph)
      if (phase_of[ph] == 0) {
        phase_of[ph] = long(l.phases.size());
        const std::size_t p = ph / sw, q = ph % sw;
        l.phases.push_back({p, q, phase_size(ih, p, sh), phase_size(iw, q, sw)});
        hmax = std::max(hmax, long(l.phases.back().hp));
        wmax = std::max(wmax, long(l.phases.back().wp));
      }
    const long oh = long(l.oh), ow = long(l.ow);
    const long pitch = std::max({wmax - fb_min, ow + fb_max, wmax, ow});
    const long rows = std::max({hmax - fa_min, oh + fa_max, hmax, oh});
    l.pitch = std::size_t(pitch);
    l.rows = std::size_t(rows);
    l.base = std::size_t(-fa_min * pitch - fb_min);
    l.reach = std::size_t((fa_max - fa_min) * pitch + fb_max - fb_min);
    for (const Tap& t : taps)
      l.offs.push_back(
          {std::size_t(phase_of[t.phase]), std::size_t(long(l.base) + t.fa * pitch + t.fb), t.out});
    std::stable_sort(l.offs.begin(), l.offs.end(),
                     [](const Offset& a, const Offset& b) { return a.buf < b.buf; });
    return l;
  }
  std::size_t chunk_begin(std::size_t c) const { return n_ * c / nchunks_; }
  std::size_t max_chunk_images() const { return (n_ + nchunks_ - 1) / nchunks_; }

  struct Scratch {
    std::vector<TileBuffer> xt;  // per phase, [ic][xrow_]: x transposed, padded layout
    TileBuffer dyv[2];           // [dyrows_][oc][2]: dy, VNNI pairs over the padded layout (two pairings)
    std::size_t images = 0;      // images the buffers hold now (the rest of the block is zero)
  };

  void ensure_threads(std::size_t nt) {
    while (scratch_.size() < nt) {
      Scratch s;
      for (std::size_t b = 0; b < phases_.size(); ++b) s.xt.emplace_back(icp_ * xrow_);
      s.dyv[0] = TileBuffer(dyrows_ * 2 * oc_);
      s.dyv[1] = TileBuffer(dyrows_ * 2 * oc_);
      scratch_.push_back(std::move(s));
    }
  }

#if CIFARNET_AMX_X86
  // Rows [lo, hi) of the partials ([kh * kw][icp][oc]) summed into dw
  // ([kh * kw][ic][oc]); the rows of padded input channels are left out.
  void sum_partials(const float* partial, std::size_t lo, std::size_t hi, float* dw) const {
    const std::size_t per_partial = kh_ * kw_ * icp_ * oc_;
    for (std::size_t r = lo; r < hi; ++r) {
      const std::size_t c = r % icp_;
      if (c >= ic_) continue;
      add_partials(partial + r * oc_, nchunks_, per_partial, oc_, dw + ((r / icp_) * ic_ + c) * oc_);
    }
  }

  __attribute__((target("avx512f,avx512bw,avx512vl"))) void chunk(std::size_t c, const std::uint16_t* x,
                                                                  const InputMap* map,
                                                                  const std::uint16_t* dy, float* part,
                                                                  Scratch& s) const {
    const std::size_t b0 = chunk_begin(c), b1 = chunk_begin(c + 1);
    bool first = true;
    for (std::size_t m0 = b0; m0 < b1; m0 += block_) {
      const std::size_t cnt = std::min(block_, b1 - m0);
      if (cnt < s.images) clear_tail(s, cnt);
      for (std::size_t b = 0; b < phases_.size(); ++b) {
        if (map)
          copy_x<true>(x + m0 * ih_ * iw_ * ic_, cnt, phases_[b], s.xt[b].p, map);
        else
          copy_x<false>(x + m0 * ih_ * iw_ * ic_, cnt, phases_[b], s.xt[b].p, nullptr);
      }
      copy_dy(dy + m0 * oh_ * ow_ * oc_, cnt, s.dyv);
      s.images = cnt;
      products(s, round_up(cnt * plane_ + reach_, 32), part, first);
      first = false;
    }
  }

  // After a full block, a shorter one: zero the images it does not
  // overwrite, so that stale values meet no dy and no NaN can appear.
  void clear_tail(Scratch& s, std::size_t cnt) const {
    const std::size_t from = cnt * plane_;
    for (const TileBuffer& xt : s.xt)
      for (std::size_t ch = 0; ch < icp_; ++ch)
        std::memset(xt.p + ch * xrow_ + base_ + from, 0, (xrow_ - base_ - from) * 2);
    for (std::size_t e = 0; e < 2; ++e) {
      const std::size_t row = pre_ + (from + e) / 2;
      std::memset(s.dyv[e].p + row * 2 * oc_, 0, (dyrows_ - row) * 2 * oc_ * 2);
    }
  }

  // The 16 channels at p, or the first of them (mask cm) and zeros. Always
  // the masked load: a branch between it and a plain one was no faster on
  // ResNet-20's geometries (a first probe on a 2-core AMX Xeon; not kept).
  __attribute__((target("avx512f,avx512bw,avx512vl"))) static __m256i load_channels(const std::uint16_t* p,
                                                                                    __mmask16 cm) {
    return _mm256_maskz_loadu_epi16(cm, p);
  }
  // The same channels through an input map (a, b: its scale and shift for
  // them): max(0, y * a + b) with `relu`, one fused multiply-add in float,
  // rounded to bf16 (as amx::Forward3x3's prologue); zeros outside cm.
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static __m256i load_mapped(
      const std::uint16_t* p, __mmask16 cm, __m512 a, __m512 b, bool relu) {
    const __m256i bits = _mm256_maskz_loadu_epi16(cm, p);
    const __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
    __m512 v = _mm512_fmadd_ps(f, a, b);
    if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
    return _mm256_maskz_mov_epi16(cm, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
  }
  template <bool Mapped>
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static __m256i load(const std::uint16_t* p,
                                                                                      __mmask16 cm, __m512 a,
                                                                                      __m512 b, bool relu) {
    if constexpr (Mapped)
      return load_mapped(p, cm, a, b, relu);
    else
      return (void)a, (void)b, (void)relu, load_channels(p, cm);
  }

  // [lo | hi]. (_mm512_inserti64x4 would do, but GCC 12 warns inside it,
  // GCC bug 105593.)
  __attribute__((target("avx512f,avx512bw,avx512vl"))) static __m512i join(__m256i lo, __m256i hi) {
    return _mm512_mask_broadcast_i64x4(_mm512_castsi256_si512(lo), 0xf0, hi);
  }

  // One phase of an x block (cnt images, NHWC) into [ic][xrow_]: 32 of its
  // pixels (in image order, across rows and images) by 16 channels at a
  // time, transposed in registers, each channel's 32 values stored row
  // segment by row segment. Stride 1 reads x in order; a phase of a strided
  // convolution gathers its pixels (every sw-th of every sh-th row).
  // Mapped: x is a batch norm's input, each element through `map` first.
  template <bool Mapped>
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void copy_x(const std::uint16_t* x,
                                                                              std::size_t cnt,
                                                                              const Phase& ph,
                                                                              std::uint16_t* xt,
                                                                              const InputMap* map) const {
    const std::size_t hp = ph.hp, wp = ph.wp, total = cnt * hp * wp;
    const std::size_t ic = ic_;
    const bool dense = hp == ih_ && wp == iw_;  // the image itself (stride 1)
    // vpermt2q indexes of the last step: 128-bit lanes [a0 b0 a2 b2] and
    // [a1 b1 a3 b3].
    alignas(64) const std::int64_t lane_lo[8] = {0, 1, 8, 9, 4, 5, 12, 13},
                                   lane_hi[8] = {2, 3, 10, 11, 6, 7, 14, 15};
    const __m512i ilo = _mm512_load_si512(lane_lo), ihi = _mm512_load_si512(lane_hi);
    struct Seg {
      std::ptrdiff_t dst;  // offset in a channel row of lane 0's position
      __mmask32 mask;
    };
    Seg seg[32];
    const std::uint16_t* at[32];  // each pixel's channels in x (phases of strided convolutions)
    for (std::size_t p0 = 0; p0 < total; p0 += 32) {
      const std::size_t np = std::min<std::size_t>(32, total - p0);
      // Row segments of these pixels.
      int nseg = 0;
      for (std::size_t p = p0; p < p0 + np;) {
        const std::size_t m = p / (hp * wp), rem = p % (hp * wp), r = rem / wp, col = rem % wp;
        const std::size_t len = std::min(wp - col, p0 + np - p), lane = p - p0;
        const std::size_t pos = base_ + m * plane_ + r * pitch_ + col;
        seg[nseg].dst = std::ptrdiff_t(pos) - std::ptrdiff_t(lane);
        seg[nseg].mask = __mmask32(((1ull << len) - 1) << lane);
        ++nseg;
        if (!dense) {
          const std::uint16_t* row = x + ((m * ih_ + r * sh_ + ph.p) * iw_ + ph.q) * ic;
          for (std::size_t t = 0; t < len; ++t) at[lane + t] = row + (col + t) * sw_ * ic;
        }
        p += len;
      }
      const std::uint16_t* src = x + p0 * ic;
      if (dense) {
        for (std::size_t t = 0; t < np; ++t) at[t] = src + t * ic;
        // x comes from memory (the forward wrote it long before)
        host::prefetch_lines_ahead(src, np * ic * 2);
      }
      for (std::size_t cb = 0; cb < icp_; cb += 16) {
        // A last block of 8 channels (ic a multiple of 8, not of 16) reads
        // those 8 and zeros for the padded rows.
        const __mmask16 cm = cb + 16 <= ic ? __mmask16(0xffff) : __mmask16((1u << (ic - cb)) - 1);
        // The map's scale and shift for these channels (Mapped).
        const __m512 ma = Mapped ? _mm512_maskz_loadu_ps(cm, map->scale + cb) : _mm512_setzero_ps();
        const __m512 mb = Mapped ? _mm512_maskz_loadu_ps(cm, map->shift + cb) : _mm512_setzero_ps();
        const bool relu = Mapped && map->relu;
        __m512i v[16];
        if (np == 32 && dense) {
          CIFARNET_UNROLL(16)
          for (int q = 0; q < 16; ++q)
            v[q] = join(load<Mapped>(src + q * ic + cb, cm, ma, mb, relu),
                        load<Mapped>(src + (q + 16) * ic + cb, cm, ma, mb, relu));
        } else if (np == 32) {
          CIFARNET_UNROLL(16)
          for (int q = 0; q < 16; ++q)
            v[q] = join(load<Mapped>(at[q] + cb, cm, ma, mb, relu),
                        load<Mapped>(at[q + 16] + cb, cm, ma, mb, relu));
        } else {
          // Positions past the last pixel stay zero (not mapped).
          for (int q = 0; q < 16; ++q) {
            const __m256i lo =
                std::size_t(q) < np ? load<Mapped>(at[q] + cb, cm, ma, mb, relu) : _mm256_setzero_si256();
            const __m256i hi = std::size_t(q + 16) < np ? load<Mapped>(at[q + 16] + cb, cm, ma, mb, relu)
                                                        : _mm256_setzero_si256();
            v[q] = join(lo, hi);
          }
        }
        // v[q] lane l: pixel q + 16*(l>>4), channel l&15. Each step trades
        // a bit of the register number for a bit of the lane number (the
        // 16-, 32- and 64-bit unpacks rotate the lane bits below as well);
        // after the four, v[q] lane l is pixel l of channel chan[q].
        CIFARNET_UNROLL(16)
        for (int q = 0; q < 16; q += 2) {
          const __m512i a = v[q], h = v[q + 1];
          v[q] = _mm512_unpacklo_epi16(a, h);
          v[q + 1] = _mm512_unpackhi_epi16(a, h);
        }
        CIFARNET_UNROLL(16)
        for (int q = 0; q < 16; ++q) {
          if (q & 2) continue;
          const __m512i a = v[q], h = v[q + 2];
          v[q] = _mm512_mask_unpacklo_epi32(a, 0xffff, a, h);  // (mask forms: GCC bug 105593)
          v[q + 2] = _mm512_mask_unpackhi_epi32(a, 0xffff, a, h);
        }
        CIFARNET_UNROLL(16)
        for (int q = 0; q < 16; ++q) {
          if (q & 4) continue;
          const __m512i a = v[q], h = v[q + 4];
          v[q] = _mm512_mask_unpacklo_epi64(a, 0xff, a, h);
          v[q + 4] = _mm512_mask_unpackhi_epi64(a, 0xff, a, h);
        }
        CIFARNET_UNROLL(16)
        for (int q = 0; q < 8; ++q) {
          const __m512i a = v[q], h = v[q + 8];
          v[q] = _mm512_permutex2var_epi64(a, ilo, h);
          v[q + 8] = _mm512_permutex2var_epi64(a, ihi, h);
        }
        CIFARNET_UNROLL(16)
        for (int q = 0; q < 16; ++q) {
          // Register bits 0..3 hold channel bits 2, 1, 0, 3.
          const int ch = (q >> 2 & 1) | (q >> 1 & 1) << 1 | (q & 1) << 2 | (q & 8);
          std::uint16_t* row = xt + (cb + std::size_t(ch)) * xrow_;
          for (int k = 0; k < nseg; ++k) _mm512_mask_storeu_epi16(row + seg[k].dst, seg[k].mask, v[q]);
        }
      }
    }
  }

  // dy block (cnt images, NHWC) into VNNI pairs over the padded layout,
  // pixel (m, y, x) at k = m*plane + y*pitch + x, twice: in copy e, pair row
  // pre + (k + e)/2 holds k in lane (k + e) % 2, so that a pair row starts at
  // every position, even or odd.
  __attribute__((target("avx512f,avx512bw,avx512vl"))) void copy_dy(const std::uint16_t* dy, std::size_t cnt,
                                                                    TileBuffer* dyv) const {
    const std::size_t oc = oc_, ow = ow_;
    alignas(64) std::uint16_t inter[32], inter1[32];
    for (int l = 0; l < 32; ++l) {
      inter[l] = std::uint16_t((l & 1) ? 32 + l / 2 : l / 2);
      inter1[l] = std::uint16_t((l & 1) ? 16 + l / 2 : l / 2);
    }
    const __m512i idx = _mm512_load_si512(inter), idx1 = _mm512_load_si512(inter1);
    for (std::size_t m = 0; m < cnt; ++m)
      for (std::size_t y = 0; y < oh_; ++y)
        for (std::size_t e = 0; e < 2; ++e) {
          const std::uint16_t* row = dy + ((m * oh_ + y) * ow) * oc;
          if (e == 0) host::prefetch_lines_ahead(row, ow * oc * 2);  // as copy_x
          const std::size_t q0 = m * plane_ + y * pitch_ + e;        // position of x = 0, shifted by e
          std::uint16_t* out = dyv[e].p + (pre_ + q0 / 2) * 2 * oc;  // its pair row
          std::size_t x = 0;
          if (q0 % 2 == 1) {
            // x = 0 alone in lane 1 (lane 0 is a gap or the row before's).
            for (std::size_t ob = 0; ob < oc; ob += 16) {
              const __m512i a =
                  _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + ob)));
              _mm512_mask_storeu_epi16(out + 2 * ob, 0xaaaaaaaau, _mm512_permutex2var_epi16(a, idx, a));
            }
            out += 2 * oc;
            x = 1;
          }
          if (oc == 16) {
            for (; x + 1 < ow; x += 2, out += 32)
              _mm512_storeu_si512(out, _mm512_permutexvar_epi16(idx1, _mm512_loadu_si512(row + x * 16)));
          } else {
            for (; x + 1 < ow; x += 2, out += 2 * oc) {
              const std::uint16_t* pa = row + x * oc;
              for (std::size_t ob = 0; ob < oc; ob += 16) {
                const __m512i a =
                    _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa + ob)));
                const __m512i b = _mm512_castsi256_si512(
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa + oc + ob)));
                _mm512_storeu_si512(out + 2 * ob, _mm512_permutex2var_epi16(a, idx, b));
              }
            }
          }
          if (x < ow) {
            // The last pixel alone in lane 0.
            const std::uint16_t* pa = row + x * oc;
            for (std::size_t ob = 0; ob < oc; ob += 16) {
              const __m512i a =
                  _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa + ob)));
              _mm512_mask_storeu_epi16(out + 2 * ob, 0x55555555u, _mm512_permutex2var_epi16(a, idx, a));
            }
          }
        }
  }

  // The products of one copied block (input positions [0, kx), a multiple
  // of 32) added into the chunk's partial (zeroed tiles when `first`).
  void products(const Scratch& s, std::size_t kx, float* part, bool first) const {
    const std::size_t nshift = offs_.size();
    const std::size_t ma = icp_ / 16, mb = oc_ / 16;
    for (std::size_t k0 = 0; k0 < kx; k0 += ksub_) {
      const std::size_t k1 = std::min(kx, k0 + ksub_);
      const bool zero = first && k0 == 0;
      if (grouped_) {
        // Each x tile shared by the offsets of a group: six C tiles, one x
        // and one dy tile.
        using Group = void (WeightGrad::*)(const Scratch&, std::size_t, std::size_t, std::size_t, std::size_t,
                                           std::size_t, float*, bool) const;
        static constexpr Group by_offsets[6] = {&WeightGrad::group<1, 1, 1>, &WeightGrad::group<1, 1, 2>,
                                                &WeightGrad::group<1, 1, 3>, &WeightGrad::group<1, 1, 4>,
                                                &WeightGrad::group<1, 1, 5>, &WeightGrad::group<1, 1, 6>};
        for (std::size_t a = 0; a < ma; ++a)
          for (std::size_t b = 0; b < mb; ++b)
            for (const OffsetGroup& g : groups_)
              (this->*by_offsets[g.count - 1])(s, k0, k1, g.first, a, b, part, zero);
      } else {
        for (std::size_t b = 0; b < mb; b += 2)
          for (std::size_t a = 0; a < ma; a += 2) {
            const int na = a + 1 < ma ? 2 : 1, nb = b + 1 < mb ? 2 : 1;
            for (std::size_t sh = 0; sh < nshift; ++sh) {
              if (na == 2 && nb == 2)
                group<2, 2, 1>(s, k0, k1, sh, a, b, part, zero);
              else if (na == 2)
                group<2, 1, 1>(s, k0, k1, sh, a, b, part, zero);
              else if (nb == 2)
                group<1, 2, 1>(s, k0, k1, sh, a, b, part, zero);
              else
                group<1, 1, 1>(s, k0, k1, sh, a, b, part, zero);
            }
          }
      }
    }
  }

  // C tiles for offsets s0..s0+NS-1, input-channel blocks a..a+NA-1 and
  // output-channel blocks b..b+NB-1, over input positions [k0, k1): the x
  // tile at input position k meets the dy pairs that start at k - offset.
  // Tiles: C first, then NA for x, then NB for dy. Every tile load is
  // 64-byte aligned (a misaligned one costs several times more).
  template <int NA, int NB, int NS>
  void group(const Scratch& s, std::size_t k0, std::size_t k1, std::size_t s0, std::size_t a, std::size_t b,
             float* part, bool zero) const {
    using detail::static_for;
    constexpr int kA = NS * NA * NB, kB = kA + NA;
    static_assert(kB + NB <= 8, "eight tiles");
    const long cstride = long(oc_ * 4), xstride = long(xrow_ * 2), dstride = long(oc_ * 4);
    const std::size_t slice = icp_ * oc_;
    // B for offset q at position k: dyb[q] + k * oc (the pair row
    // pre + (k - off + e)/2, e = off % 2, of copy e).
    const std::uint16_t* dyb[NS];
    float* cp[NS];
    for (int q = 0; q < NS; ++q) {
      const Offset& o = offs_[s0 + std::size_t(q)];
      const std::size_t off = o.off, e = off % 2;
      dyb[q] = s.dyv[e].p + (pre_ * 2 - off + e) * oc_ + b * 32;
      cp[q] = part + o.out * slice + a * 16 * oc_ + b * 16;
    }
    static_for<NS>([&](auto q) {
      static_for<NA>([&](auto u) {
        static_for<NB>([&](auto v) {
          constexpr int t = (decltype(q)::value * NA + decltype(u)::value) * NB + decltype(v)::value;
          if (zero)
            detail::tile_zero<t>();
          else
            detail::tile_load<t>(
                cp[decltype(q)::value] + decltype(u)::value * 16 * oc_ + decltype(v)::value * 16, cstride);
        });
      });
    });
    const std::uint16_t* xa = s.xt[offs_[s0].buf].p + a * 16 * xrow_;
    for (std::size_t k = k0; k < k1; k += 32) {
      static_for<NA>([&](auto u) {
        detail::tile_load<kA + decltype(u)::value>(xa + decltype(u)::value * 16 * xrow_ + k, xstride);
      });
      static_for<NS>([&](auto q) {
        static_for<NB>([&](auto v) {
          detail::tile_load<kB + decltype(v)::value>(
              dyb[decltype(q)::value] + k * oc_ + decltype(v)::value * 32, dstride);
        });
        static_for<NA>([&](auto u) {
          static_for<NB>([&](auto v) {
            constexpr int t = (decltype(q)::value * NA + decltype(u)::value) * NB + decltype(v)::value;
            detail::tile_dp<t, kA + decltype(u)::value, kB + decltype(v)::value>();
          });
        });
      });
    }
    static_for<NS>([&](auto q) {
      static_for<NA>([&](auto u) {
        static_for<NB>([&](auto v) {
          constexpr int t = (decltype(q)::value * NA + decltype(u)::value) * NB + decltype(v)::value;
          detail::tile_store<t>(
              cp[decltype(q)::value] + decltype(u)::value * 16 * oc_ + decltype(v)::value * 16, cstride);
        });
      });
    });
  }
#endif

  std::size_t n_, ih_, iw_, ic_, icp_, oc_, kh_, kw_, sh_, sw_;  // icp_: ic rounded up to 16
  std::vector<Phase> phases_;                                    // the phases in use, one copy of x each
  std::vector<Offset> offs_;
  struct OffsetGroup {
    std::size_t first, count;
  };
  std::vector<OffsetGroup> groups_;
  std::size_t oh_ = 0, ow_ = 0, pitch_ = 0, rows_ = 0, plane_ = 0, base_ = 0;
  std::size_t nchunks_ = 1, block_ = 1, reach_ = 0, kx_ = 32, xrow_ = 0, pre_ = 1, dyrows_ = 0;
  bool grouped_ = false;    // stride 1: offsets in groups_
  std::size_t ksub_ = 128;  // input positions per pass of a 2x2 group
  std::vector<float> partial_;
  std::vector<Scratch> scratch_;
};

}  // namespace amx
}  // namespace onednn
}  // namespace backend
}  // namespace cifarnet
