// cifarnet/backend/onednn/winograd.hpp — the project's own fp32 Winograd
// F(4x4, 3x3) convolution for NHWC 3x3, stride-1, SAME-padded convolutions
// with channel counts that are multiples of 16: the forward (with bias and
// ReLU in its output transform) and, as the forward of dy with the weights
// flipped and transposed, the data gradient. ops::Conv2d<OneDnn> runs it
// where Winograd is chosen for a geometry (ConvAlgorithm::Winograd, or Auto
// at a batch of 4 or fewer: style transfer's single images, whose weights
// are frozen) and oneDNN offers no Winograd kernel for it: oneDNN 2.6 has
// Winograd on AVX-512 only, so on AVX2 CPUs those convolutions ran its
// direct kernel.
//
// The algorithm (Lavin and Gray, 2015): each 4 x 4 block of outputs comes
// from a 6 x 6 patch of the input. The patch is transformed (Bᵀ d B, adds
// and a few multiplies), and so are the weights (G g Gᵀ, once per weights
// version, in double, rounded to float); then for each of the 36 positions
// of the transformed tile, a matrix product over the input channels (tiles x
// ci times ci x co); then the 36 products of each tile are transformed back
// (Aᵀ m A) into its 4 x 4 outputs. The products hold 36 multiplies per 16
// outputs and input-output channel pair where the direct algorithm needs
// 144: 4x fewer, the transforms' work aside.
//
// Work: where the transformed weights take at most 1 MiB (ResNet's 16 to
// 64 channels, VGG-19's first stage), each thread takes its share of the
// tiles in blocks whose transformed inputs and products fit in about 256
// KiB and runs the three passes on each block itself (input transform,
// products over (position, 16 output channels), output transform): its
// data stays in its own L2, with no barrier between the passes. On a Zen 4
// EPYC that ran ResNet's stages 1.1-1.9x as fast as the shared blocks
// below, the same bits (docs/runs/bench/2026-12-06-zen4-own-inference/
// probes/wino_blocks.txt), whose passes hand about 6 MiB a block between
// the cores through the shared L3 (and ran 2-3 times slower in that VM's
// slow spells, oneDNN's direct kernel 1.0-1.3 times: stage_shapes.txt).
// Larger weights take blocks shared by the threads, sized so that a
// block's transformed inputs and products fit in a few MiB (one block's
// products per position read the position's ci x co transformed weights
// once: a block of at least 128 tiles where the weights outgrow the
// caches); per block three parallel loops, input transform over tiles,
// products over (position, 16 output channels), output transform over
// tiles. Kernels in AVX2 + FMA (6 tiles x 16 output channels of sums in
// registers), compiled with a target attribute so the library builds for
// any x86-64, run where the CPU has AVX2 (direct::cpu_isa()). In
// inference the plan's rule
// conv_winograd_epilogue runs them in place of oneDNN's direct kernel on
// AVX2 CPUs and on AVX-512 in 256-bit halves (Zen 4, where they ran
// ResNet's 32- and 64-channel stages about twice as fast as oneDNN's
// AVX-512 kernel: docs/runs/bench/2026-12-06-zen4-own-inference/).
//
// In fp32 training with Winograd asked for (ConvAlgorithm::Winograd),
// ConvBatchNorm's own kernels (direct_conv.hpp: the batch norm's
// statistics in the forward's epilogue, its input gradient in the
// backward's prologue) run these kernels in place of their direct forward
// kernel, forward and data gradient, from 32 channels on the CPUs above
// (bn_supports): each thread a chunk of whole images at a time through
// run_images, its blocks of tiles its own; the weight gradient stays
// direct. ResNet-20 and -56 trained 1.13x and 1.15x as fast on a Zen 4 EPYC
// (docs/runs/bench/2026-12-06-zen4-winograd-training/). Training results
// then differ between CPUs where these kernels run and those where
// oneDNN's Winograd does (the direct kernels give the same bits on any):
// one reason Auto never trains with Winograd.
//
// Numerics: Winograd sums differently transformed terms, so its results
// differ from the direct algorithm's by more than rounding order: relative
// errors around 1e-6 to 1e-5 of the largest term in float (docs/NUMERICS.md,
// "Own Winograd"; tests/backend/test_winograd.cpp bounds them against the
// double reference).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cifarnet/backend/host/unroll.hpp"
#include "cifarnet/backend/onednn/direct_conv.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/ops/geometry.hpp"

namespace cifarnet {
namespace backend {
namespace onednn {
namespace winograd {

/// Why the own Winograd kernels do not take `g`, in words; empty when they
/// do: float NHWC, 3x3, stride 1, padding 1 on every side (output the
/// input's size), input and output channels multiples of 16, on a CPU with
/// AVX2 and FMA.
inline std::string why_not(const ConvGeom& g) {
  if (direct::cpu_isa() == direct::Isa::None)
    return "this CPU has no AVX2 (the own Winograd kernels need it)";
  if (g.fmt != DataFormat::NHWC) return "NCHW (the own Winograd kernels are NHWC)";
  if (g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.pt != 1 || g.pb != 1 || g.pl != 1 || g.pr != 1 ||
      g.oh != g.ih || g.ow != g.iw)
    return std::to_string(g.kh) + "x" + std::to_string(g.kw) + " stride " + std::to_string(g.sh) +
           " (the own Winograd kernels: 3x3, stride 1, padding 1)";
  if (g.ic == 0 || g.oc == 0 || g.ic % 16 != 0 || g.oc % 16 != 0)
    return std::to_string(g.ic) + " -> " + std::to_string(g.oc) +
           " channels (the own Winograd kernels: multiples of 16)";
  if (g.n == 0 || g.ih == 0 || g.iw == 0) return "an empty batch";
  return {};
}

/// Whether the own Winograd kernels take `g` (why_not(g) empty).
inline bool supports(const ConvGeom& g) { return why_not(g).empty(); }

/// Whether the own conv + batch norm kernels (direct::forward_images and
/// direct::backward_images: ConvBatchNorm's training passes) run `g` with
/// these Winograd kernels in place of their direct forward kernel where
/// Winograd is asked for (ConvAlgorithm::Winograd): a geometry of both, on
/// a CPU where the own kernels stand in for oneDNN's
/// (direct::own_inference_measured: AVX2, which oneDNN 2.6 gives no
/// Winograd, and AVX-512 in 256-bit halves), with at least 32 channels. At
/// 16 channels (ResNet's first stage) the transforms cost what the quarter
/// of the multiplies saves: on a Zen 4 EPYC the Winograd passes ran as fast
/// as the direct kernels there (forward 0.96-1.02x, backward 0.99-1.06x),
/// against 1.45-2.23x and 1.17-1.50x at 32 and 64 channels, batch 128
/// (docs/runs/bench/2026-12-06-zen4-winograd-training/probes/), so the
/// direct kernels, whose sums keep the float bound, run there. On AVX-512
/// with full-width units oneDNN's own Winograd runs instead, without the
/// fusions (ops::Conv2d::direct_bn).
inline bool bn_supports(const ConvGeom& g) {
  return g.ic >= 32 && supports(g) && direct::supports(g) && direct::own_inference_measured();
}
/// Why bn_supports(g) is false, in words; empty where it is true.
inline std::string bn_why_not(const ConvGeom& g) {
  std::string why = why_not(g);
  if (why.empty()) why = direct::why_not(g);
  if (why.empty() && !direct::own_inference_measured())
    why =
        "AVX-512 on full-width units: oneDNN's Winograd (the own Winograd kernels stand in for it on AVX2 "
        "and on Zen 4's AVX-512 in halves only)";
  if (why.empty() && g.ic < 32)
    why = std::to_string(g.ic) +
          " channels: the direct kernels (the own Winograd measured no faster in "
          "training below 32)";
  return why;
}

/// One call's shape: n images of h x w pixels, ci -> co channels, and its
/// tiles (th x tw of 4 x 4 outputs per image).
struct Plan {
  int n = 0, h = 0, w = 0;
  std::size_t ci = 0, co = 0;
  int th = 0, tw = 0;
  std::size_t tiles() const { return std::size_t(n) * std::size_t(th) * std::size_t(tw); }
};

#if CIFARNET_DIRECT_X86
namespace kernels {
namespace avx2 {
#define CIFARNET_WK __attribute__((target("avx2,fma")))
using Vec = direct::kernels::avx2::Vec;                  // the direct kernels' 8 floats of AVX2
#include "cifarnet/backend/onednn/winograd_kernels.hpp"  // NOLINT(build/include): included per ISA
#undef CIFARNET_WK
}  // namespace avx2
}  // namespace kernels
#endif

/// The transformed weights of one convolution: for each of the 36 positions
/// k, G g Gᵀ as a ci x co matrix, packed in panels of 16 output channels
/// (U[k][co / 16][ci][16]), from HWIO weights; computed in double.
inline void transform_weights(const float* w, std::size_t ci, std::size_t co, float* U) {
  static constexpr double G[6][3] = {{1.0 / 4, 0, 0},
                                     {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                     {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                     {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                     {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                     {0, 0, 1}};
  const std::size_t panels = co / 16;
  // A panel of 16 output channels at a time, the 16 lanes innermost (the
  // weights' rows and U's panels are contiguous in them): the compiler
  // vectorises it, which matters where the weights change every step
  // (training: transformed once per step and convolution).
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t item = 0; item < std::ptrdiff_t(ci * panels); ++item) {
    const std::size_t c = std::size_t(item) / panels, ob = std::size_t(item) % panels;
    double g[3][3][16], t[6][3][16];
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) {
        const float* src = w + ((std::size_t(a) * 3 + std::size_t(b)) * ci + c) * co + ob * 16;
        for (int l = 0; l < 16; ++l) g[a][b][l] = double(src[l]);
      }
    for (int i = 0; i < 6; ++i)
      for (int b = 0; b < 3; ++b)
        for (int l = 0; l < 16; ++l)
          t[i][b][l] = G[i][0] * g[0][b][l] + G[i][1] * g[1][b][l] + G[i][2] * g[2][b][l];
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 6; ++j) {
        const std::size_t k = std::size_t(i) * 6 + std::size_t(j);
        float* dst = U + ((k * panels + ob) * ci + c) * 16;
        for (int l = 0; l < 16; ++l)
          dst[l] = float(t[i][0][l] * G[j][0] + t[i][1][l] * G[j][1] + t[i][2][l] * G[j][2]);
      }
  }
}

/// One Winograd convolution's state: its transformed weights (remade when
/// the caller's buffer or version changes; version 0: unknown, every call;
/// 4x the weights' size) and, unless the caller lends them, the work
/// buffers of a block of tiles, kept between calls.
class Conv3x3 {
 public:
  /// Tiles per block for ci -> co channels and `tiles` tiles in all (see
  /// the file comment): the transformed inputs and products of a block in
  /// about 6 MiB, at least 128 tiles where the weights exceed 2 MiB, the
  /// blocks then evened out.
  static std::size_t block_tiles(std::size_t ci, std::size_t co, std::size_t tiles) {
    if (tiles == 0) return 1;  // an empty call: nothing to block (and no division by 0)
    const std::size_t per_tile = 36 * (ci + co) * sizeof(float);
    std::size_t s = std::max<std::size_t>((std::size_t(6) << 20) / per_tile, 6);
    if (36 * ci * co * sizeof(float) > (std::size_t(2) << 20)) s = std::max<std::size_t>(s, 128);
    s = std::min(s, tiles);
    const std::size_t blocks = (tiles + s - 1) / s;
    return (tiles + blocks - 1) / blocks;
  }

  /// Makes the transformed weights current for HWIO `w` (ci -> co) at
  /// `version`; true when they were remade.
  bool set_weights(const float* w, std::uint64_t version, std::size_t ci, std::size_t co) {
    if (version != 0 && w == of_ && version == version_ && ci == ci_ && co == co_) return false;
    if (U_.size() != 36 * ci * co) U_.resize(36 * ci * co);
    transform_weights(w, ci, co, U_.data());
    of_ = w;
    version_ = version;
    ci_ = ci;
    co_ = co;
    ++transforms_;
    return true;
  }
  /// Forgets the transformed weights (the next set_weights remakes them).
  void invalidate() { of_ = nullptr; }
  /// How many times the weights were transformed (tests).
  std::size_t weight_transforms() const { return transforms_; }

  /// Whether a call keeps each thread on tiles of its own (transformed
  /// weights of at most 1 MiB: ResNet's 16 to 64 channels, VGG's first
  /// stage): each thread transforms, multiplies and transforms back a
  /// block of its own tiles, in its own work space sized for its L2
  /// (thread_tiles), with the weights' transform read once per block from
  /// the shared caches; no barrier between the three passes. Larger weights
  /// take the shared blocks of block_tiles, whose products read the
  /// weights once per block of at least 128 tiles.
  static bool per_thread(std::size_t ci, std::size_t co) {
    return 36 * ci * co * sizeof(float) <= (std::size_t(1) << 20);
  }
  /// Tiles per block of one thread (per_thread): its transformed inputs
  /// and products in about 256 KiB, a multiple of the products' 6 rows, at
  /// most the thread's share of `tiles` among `threads`.
  static std::size_t thread_tiles(std::size_t ci, std::size_t co, std::size_t tiles, int threads) {
    const std::size_t m = std::size_t(std::max(threads, 1)), share = (tiles + m - 1) / m;
    return std::max<std::size_t>(std::min(block_cap(ci, co), share), 1);
  }
  /// Tiles per block of one thread at most: its transformed inputs and
  /// products in about 256 KiB, a multiple of the products' 6 rows.
  static std::size_t block_cap(std::size_t ci, std::size_t co) {
    const std::size_t per_tile = 36 * (ci + co) * sizeof(float);
    return std::max<std::size_t>((std::size_t(256) << 10) / per_tile / 6 * 6, 6);
  }
  /// Images of h x w pixels a run_images call takes at a time (as many as
  /// fill one block of block_cap tiles, at least one).
  static std::size_t images_per_call(std::size_t ci, std::size_t co, int h, int w) {
    const std::size_t per_image = std::size_t((h + 3) / 4) * std::size_t((w + 3) / 4);
    return std::max<std::size_t>(block_cap(ci, co) / std::max<std::size_t>(per_image, 1), 1);
  }
  /// Floats of work space a run_images call on at most `images` images of
  /// h x w pixels needs (one block's transformed inputs and products).
  static std::size_t images_work_floats(std::size_t ci, std::size_t co, std::size_t images, int h, int w) {
    const std::size_t tiles = images * std::size_t((h + 3) / 4) * std::size_t((w + 3) / 4);
    return 36 * std::min(block_cap(ci, co), std::max<std::size_t>(tiles, 1)) * (ci + co);
  }

  /// Floats of work space a call needs (a block's transformed inputs, then
  /// its products; per_thread: one block for each of the
  /// omp_get_max_threads() threads) for ci -> co channels and `tiles`
  /// tiles.
  static std::size_t work_floats(std::size_t ci, std::size_t co, std::size_t tiles) {
    if (per_thread(ci, co)) {
      const int nt = omp_get_max_threads();
      return std::size_t(nt) * 36 * thread_tiles(ci, co, tiles, nt) * (ci + co);
    }
    return 36 * block_tiles(ci, co, tiles) * (ci + co);
  }

  /// y = conv(x, w) (+ bias[c]) (+ sum) (then max(., 0) with relu) for n
  /// NHWC images of h x w pixels, x with the ci channels and y with the co
  /// channels of the last set_weights; y overwritten; sum (may be null, may
  /// be y) laid out as y. `work`: work_floats() floats the caller lends (a
  /// device's scratch, shared by every layer; sized with the thread count
  /// this call runs with), or null: the object's own, kept.
  void run(int n, int h, int w, const float* x, const float* bias, bool relu, float* y, float* work = nullptr,
           const float* sum = nullptr) {
    const Plan p = plan(n, h, w);
    const std::size_t T = p.tiles(), panels = co_ / 16;
    if (!work) {
      const std::size_t need = work_floats(ci_, co_, T);
      if (work_.size() < need) work_.resize(need);
      work = work_.data();
    }
    const float* U = U_.data();
#if CIFARNET_DIRECT_X86
    namespace k = kernels::avx2;
    if (per_thread(ci_, co_)) {
      const int nt = omp_get_max_threads();
      const std::size_t S = thread_tiles(ci_, co_, T, nt);
#pragma omp parallel num_threads(nt)
      {
        const std::size_t t = std::size_t(omp_get_thread_num()), m = std::size_t(omp_get_num_threads());
        own_blocks(p, x, T * t / m, T * (t + 1) / m, S, work + t * 36 * S * (ci_ + co_), bias, sum, relu, y);
      }
      return;
    }
    const std::size_t S = block_tiles(ci_, co_, T);
    float* V = work;
    float* M = work + 36 * S * ci_;
#pragma omp parallel
    {
      for (std::size_t base = 0; base < T; base += S) {
        const std::size_t s = std::min(S, T - base);
#pragma omp for schedule(static)
        for (std::ptrdiff_t t = 0; t < std::ptrdiff_t(s); ++t)
          k::input_tiles(p, x, base, base + std::size_t(t), base + std::size_t(t) + 1, S, V);
#pragma omp for schedule(static)
        for (std::ptrdiff_t item = 0; item < std::ptrdiff_t(36 * panels); ++item) {
          const std::size_t pos = std::size_t(item) / panels, cb = std::size_t(item) % panels;
          k::gemm_panel(s, ci_, co_, V + pos * S * ci_, U + (pos * panels + cb) * ci_ * 16, M + pos * S * co_,
                        cb);
        }
#pragma omp for schedule(static)
        for (std::ptrdiff_t t = 0; t < std::ptrdiff_t(s); ++t)
          k::output_tiles(p, M, base, base + std::size_t(t), base + std::size_t(t) + 1, S, bias, sum, relu,
                          y);
      }
    }
#else
    (void)U, (void)x, (void)bias, (void)relu, (void)y, (void)panels, (void)sum;
    throw ConfigError("winograd::Conv3x3: the own Winograd kernels need an x86-64 CPU with AVX2");
#endif
  }

  /// y = conv(x, w) for n NHWC images of h x w pixels (the channels of the
  /// last set_weights), on the calling thread alone: for a thread of a
  /// parallel loop over images (the own conv + batch norm kernels,
  /// direct::forward_images and direct::backward_images, which take each
  /// chunk of images_per_call images through it). The tiles in evened-out
  /// blocks of at most block_cap; `work`: images_work_floats(ci, co, n, h,
  /// w) floats of this thread's own. Each output is the same as run()'s
  /// (a tile's sums do not depend on its block).
  void run_images(int n, int h, int w, const float* x, float* y, float* work) const {
    const Plan p = plan(n, h, w);
    const std::size_t T = p.tiles();
    if (T == 0) return;
    const std::size_t cap = block_cap(ci_, co_), blocks = (T + cap - 1) / cap, S = (T + blocks - 1) / blocks;
    own_blocks(p, x, 0, T, S, work, nullptr, nullptr, false, y);
  }

  /// run_images as the direct kernels' stand-in for their forward kernel
  /// on images of h x w pixels (this object must outlive the call it is
  /// handed to, its weights set).
  direct::ImageConv image_conv(int h, int w) const {
    direct::ImageConv c;
    c.self = this;
    c.run = [](const void* self, int n, int ih, int iw, const float* x, float* y, float* work) {
      static_cast<const Conv3x3*>(self)->run_images(n, ih, iw, x, y, work);
    };
    c.images = images_per_call(ci_, co_, h, w);
    c.work_floats = images_work_floats(ci_, co_, c.images, h, w);
    return c;
  }

 private:
  // Tiles [lo, hi) of the plan `p` on the calling thread, in blocks of at
  // most S tiles through its own work space `work` (36 S (ci + co)
  // floats): per block the input transform, the products over (position,
  // 16 output channels) and the output transform with bias, sum and ReLU
  // (run's per-thread path, run_images).
  void own_blocks(const Plan& p, const float* x, std::size_t lo, std::size_t hi, std::size_t S, float* work,
                  const float* bias, const float* sum, bool relu, float* y) const {
#if CIFARNET_DIRECT_X86
    namespace k = kernels::avx2;
    const std::size_t panels = co_ / 16;
    const float* U = U_.data();
    float* V = work;
    float* M = V + 36 * S * ci_;
    for (std::size_t base = lo; base < hi; base += S) {
      const std::size_t s = std::min(S, hi - base);
      k::input_tiles(p, x, base, base, base + s, S, V);
      for (std::size_t pos = 0; pos < 36; ++pos)
        for (std::size_t cb = 0; cb < panels; ++cb)
          k::gemm_panel(s, ci_, co_, V + pos * S * ci_, U + (pos * panels + cb) * ci_ * 16, M + pos * S * co_,
                        cb);
      k::output_tiles(p, M, base, base, base + s, S, bias, sum, relu, y);
    }
#else
    (void)p, (void)x, (void)lo, (void)hi, (void)S, (void)work, (void)bias, (void)sum, (void)relu, (void)y;
#endif
  }

  // A call's shape: n images of h x w pixels, the channels of the weights.
  Plan plan(int n, int h, int w) const {
    Plan p;
    p.n = n;
    p.h = h;
    p.w = w;
    p.ci = ci_;
    p.co = co_;
    p.th = (h + 3) / 4;
    p.tw = (w + 3) / 4;
    return p;
  }

  cifarnet::detail::AlignedBuffer<float> U_, work_;
  const float* of_ = nullptr;
  std::uint64_t version_ = 0;
  std::size_t ci_ = 0, co_ = 0, transforms_ = 0;
};

/// A layer's own Winograd passes: the forward, and the data gradient as the
/// forward of dy with the weights flipped in (kh, kw) and transposed in (ci,
/// co), each with its transformed weights.
struct Layer {
  Conv3x3 fwd, bwd;
  std::vector<float> flipped;  // HWIO with I = oc, O = ic
  const float* flipped_of = nullptr;
  std::uint64_t flipped_version = 0;

  /// Bytes of work space forward and backward_data need for `g` (the
  /// `work` they may be lent).
  static std::size_t work_bytes(const ConvGeom& g) {
    return Conv3x3::work_floats(g.ic, g.oc, g.n * ((g.ih + 3) / 4) * ((g.iw + 3) / 4)) * sizeof(float);
  }
  /// y = conv(x, w) + b (b may be null) + sum (may be null, may be y),
  /// then ReLU with relu; w HWIO at Parameters version `version` (0:
  /// unknown). True when the weights were transformed (not reused).
  /// `work`: work_bytes(g) lent, or null.
  bool forward(const ConvGeom& g, const float* x, const float* w, std::uint64_t version, const float* b,
               bool relu, float* y, float* work = nullptr, const float* sum = nullptr) {
    const bool fresh = fwd.set_weights(w, version, g.ic, g.oc);
    fwd.run(int(g.n), int(g.ih), int(g.iw), x, b, relu, y, work, sum);
    return fresh;
  }
  /// dx = the data gradient of dy for weights w (HWIO) at `version`. True
  /// when the weights were flipped and transformed (not reused).
  bool backward_data(const ConvGeom& g, const float* dy, const float* w, std::uint64_t version, float* dx,
                     float* work = nullptr) {
    const bool fresh = set_backward_weights(g, w, version);
    bwd.run(int(g.n), int(g.oh), int(g.ow), dy, nullptr, false, dx, work);
    return fresh;
  }
  /// Makes bwd's transformed weights current for backward_data with
  /// weights w (HWIO) at `version` (flipped and transposed first where
  /// they changed); true when they were transformed.
  bool set_backward_weights(const ConvGeom& g, const float* w, std::uint64_t version) {
    if (version == 0 || w != flipped_of || version != flipped_version || flipped.size() != 9 * g.ic * g.oc) {
      flipped.resize(9 * g.ic * g.oc);
      for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t j = 0; j < 3; ++j) {
          const float* src = w + ((2 - i) * 3 + (2 - j)) * g.ic * g.oc;  // [c][o]
          float* dst = flipped.data() + (i * 3 + j) * g.oc * g.ic;       // [o][c]
          for (std::size_t c = 0; c < g.ic; ++c)
            for (std::size_t o = 0; o < g.oc; ++o) dst[o * g.ic + c] = src[c * g.oc + o];
        }
      flipped_of = w;
      flipped_version = version;
      bwd.invalidate();
    }
    return bwd.set_weights(flipped.data(), version == 0 ? 0 : 1, g.oc, g.ic);
  }
};

}  // namespace winograd
}  // namespace onednn
}  // namespace backend
}  // namespace cifarnet
