// cifarnet/backend/onednn/direct_conv.hpp — the project's own fp32 kernels
// for the backward of a 3x3, stride-1, SAME-padded NHWC convolution with
// 16, 32 or 64 channels in and out (ResNet's stage convolutions), whose
// output gradient is a batch norm's input gradient computed image by image
// in the kernels' prologue (ops::Conv2d::backward_images_bn, ConvBatchNorm),
// and for its training forward (ops::Conv2d::forward_stats), and its
// inference forward with a bias, residual sum and ReLU epilogue in the
// registers (ops::ConvEpilogue, forward_inference). Around the
// kernels, image by image while each is in cache: in the backward's
// epilogue a residual block's gradient sum and an earlier batch norm's
// backward sums (bn::GradEpilogue); in the forward's epilogue the batch
// norm statistics of the output (forward_images); in either's prologue an
// input given as an earlier batch norm's map instead of stored
// (ops::BnNormMap). docs/ARCHITECTURE.md's hand-over list says who asks.
// Where Winograd is asked for, the own Winograd kernels stand in for the
// forward kernel (forward and data gradient) through an ImageConv, each
// thread on chunks of whole images (winograd.hpp, bn_supports).
//
// Why own kernels: batch norm's input gradient was a pass of its own over
// every range of images (read dy and x, write a buffer) before oneDNN's
// backward read that buffer; here each thread computes one image of it into
// a buffer of its own and runs both backward passes of that image from
// there while it is in cache, the whole in one parallel loop. oneDNN 2.6
// has no prologue to its kernels. Measured against oneDNN's kernels on
// ResNet-20's three shapes (2-core AMX Xeon, batch 128:
// docs/runs/bench/2026-11-28-ef4695e-amx-bn-passes-tried/probes/): the
// backward data 1.07-1.25x as fast as oneDNN's jit kernel, the weight
// gradient 0.94-1.08x; oneDNN's forward equals this forward kernel's output
// exactly there. What makes them as fast as oneDNN's: the taps that fall on
// the padding are skipped (a kernel row's range by the output row, the edge
// pixels left out of the first and last kernel column), not multiplied by
// zeros of a padded copy (at 8x8, 16 % of the work).
//
// Kernels, in AVX-512 where oneDNN reports avx512_core, else in AVX2 + FMA
// where it reports avx2 (each compiled with a target attribute, so the
// library builds for any x86-64, and without them elsewhere; the bodies are
// written once over the vector width in direct_conv_kernels.hpp):
// - backward data: dx = the forward of dy with the weights flipped in (kh,
//   kw) and transposed in (ci, co), register tiles of P pixels x Q vectors
//   of output channels (AVX-512: C=16 P=16 Q=1, C=32 and 64 P=8 Q=2; AVX2:
//   C=16 and 32 P=6 Q=2, C=64 P=8 Q=1, a row's last tile shorter where P
//   does not divide its width); each input element broadcast, the weights
//   loaded as vectors, summed over (kh, kw, ci) in that order.
// - weight gradient: per kernel row, 3 kernel columns of accumulators over
//   a row of pixels: CI input channels broadcast times Q vectors of output
//   channels (AVX-512 32: CI=4 Q=2, 64: CI=2 Q=4; AVX2 16: CI=4 Q=1, 32 and
//   64: CI=2 Q=2), or for AVX-512's 16 channels a vector of 16 input
//   channels times dy broadcast per output channel, 8 output channels at a
//   time. Each thread sums its images into its own gradient, and the
//   threads' gradients are added in thread order: the result depends on the
//   thread count, not on timing, and not on the instruction set (every
//   output adds its products in the same order in both).
// On a 2-core AMD EPYC Zen 2 (AVX2) the AVX2 kernels with batch norm's
// passes inside them made the fp32 training step 1.08x (ResNet-56) to
// 1.28x (ResNet-20) as fast as oneDNN's AVX2 kernels with those passes on
// their own (medians of three rounds on a noisy VM: docs/BENCHMARKS.md).
#pragma once

#include <omp.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define CIFARNET_DIRECT_X86 1
#else
#define CIFARNET_DIRECT_X86 0
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cifarnet/backend/host/mask_bits.hpp"
#include "cifarnet/backend/host/unroll.hpp"
#include "cifarnet/backend/onednn/bn_kernels.hpp"
#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/ops/geometry.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace backend {
namespace onednn {
namespace direct {

/// What the kernels' prologue computes: a batch norm's input gradient from
/// its inputs (bn::GradMap, pointers at the first image of the range).
using BnGradMap = bn::GradMap;
/// What the kernels do to each image of dx after computing it: a residual
/// sum, an earlier batch norm's backward sums (bn::GradEpilogue).
using BnEpilogue = bn::GradEpilogue;
/// An input given as an earlier batch norm's map (ops::BnNormMap, at the
/// first image of the call's images): each image of it computed into a
/// buffer first, the forward kernel and the weight gradient reading it from
/// there.
using NormMap = ops::BnNormMap<float>;

/// The instruction set the kernels run in here: AVX-512 where oneDNN
/// reports avx512_core, else AVX2 (with FMA) where it reports avx2, else
/// none (the kernels do not run). oneDNN's answer follows its
/// ONEDNN_MAX_CPU_ISA variable, so `ONEDNN_MAX_CPU_ISA=AVX2` runs the AVX2
/// kernels on an AVX-512 CPU (the tests do, tests/backend/CMakeLists.txt).
enum class Isa { None, Avx2, Avx512 };
inline Isa cpu_isa() {
  if (!CIFARNET_DIRECT_X86) return Isa::None;
  const unsigned isa = unsigned(dnnl::get_effective_cpu_isa()), core = unsigned(dnnl::cpu_isa::avx512_core),
                 avx2 = unsigned(dnnl::cpu_isa::avx2);
  if ((isa & core) == core) return Isa::Avx512;
  if ((isa & avx2) == avx2) return Isa::Avx2;
  return Isa::None;
}
/// The instruction set's name, for messages.
inline const char* isa_name(Isa i) { return i == Isa::Avx512 ? "AVX-512" : i == Isa::Avx2 ? "AVX2" : "none"; }

/// Whether the CPU runs the kernels (x86-64 with AVX-512 or AVX2).
inline bool cpu_supported() { return cpu_isa() != Isa::None; }

/// Whether the kernels run AVX-512 here on a CPU that executes it in two
/// 256-bit halves: AMD's family 25, whose only cores with AVX-512 are Zen
/// 4's. There a 512-bit kernel does no more multiply-adds a cycle than an
/// AVX2 one, so oneDNN's AVX-512 convolutions have no width over the own
/// AVX2 Winograd kernels (winograd.hpp).
inline bool avx512_in_halves() {
#if CIFARNET_DIRECT_X86
  static const bool zen4 = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u || d != 0x69746e65u || c != 0x444d4163u)
      return false;  // not "AuthenticAMD"
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    unsigned family = (a >> 8) & 0xFu;
    if (family == 0xFu) family += (a >> 20) & 0xFFu;
    return family == 0x19u;
  }();
  return zen4 && cpu_isa() == Isa::Avx512;
#else
  return false;
#endif
}

/// Whether the own inference kernels (forward_inference and the own
/// Winograd kernels) were measured ahead of oneDNN's inference convolution
/// on a CPU like this one: AVX2 (Zen 2 and Zen 3 EPYCs), and AVX-512 in
/// 256-bit halves (a Zen 4 EPYC: docs/BENCHMARKS.md, 2026-12-06). On
/// AVX-512 with full-width units (Intel's Xeons, Zen 5) they were not
/// compared in inference: oneDNN's kernel runs there.
inline bool own_inference_measured() { return cpu_isa() == Isa::Avx2 || avx512_in_halves(); }

/// Pixels per register tile of the AVX-512 forward (and backward-data)
/// kernel for C channels: its row width must be a multiple of it. The AVX2
/// kernel ends a row with a shorter tile where needed (any width): 1.
constexpr std::size_t tile_pixels(Isa isa, std::size_t c) { return isa == Isa::Avx2 ? 1 : c == 16 ? 16 : 8; }

/// Whether backward_images runs `g`: float NHWC, 3x3, stride 1, padding 1
/// on every side, 16, 32 or 64 channels in and out, rows a multiple of the
/// tile, on a CPU with the kernels.
inline bool supports(const ConvGeom& g) {
  const Isa isa = cpu_isa();
  const bool shape = g.fmt == DataFormat::NHWC && g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 &&
                     g.pt == 1 && g.pb == 1 && g.pl == 1 && g.pr == 1 && g.ic == g.oc &&
                     (g.ic == 16 || g.ic == 32 || g.ic == 64) && g.oh == g.ih && g.ow == g.iw && g.ih >= 2 &&
                     g.iw >= 2;
  return shape && isa != Isa::None && g.iw % tile_pixels(isa, g.ic) == 0;
}

/// Why backward_images does not run `g` (supports(g) false), in words; empty
/// when it does.
inline std::string why_not(const ConvGeom& g) {
  const Isa isa = cpu_isa();
  if (isa == Isa::None) return "this CPU has neither AVX-512 nor AVX2 (the own kernels need one)";
  if (g.fmt != DataFormat::NHWC) return "NCHW (the own kernels are NHWC)";
  if (g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.pt != 1 || g.pb != 1 || g.pl != 1 || g.pr != 1)
    return std::to_string(g.kh) + "x" + std::to_string(g.kw) + " stride " + std::to_string(g.sh) +
           " (the own kernels: 3x3, stride 1, padding 1)";
  if (g.ic != g.oc || !(g.ic == 16 || g.ic == 32 || g.ic == 64))
    return std::to_string(g.ic) + " -> " + std::to_string(g.oc) +
           " channels (the own kernels: 16, 32 or 64, in = out)";
  if (g.ih < 2 || g.iw < 2 || g.iw % tile_pixels(isa, g.ic) != 0)
    return std::to_string(g.ih) + "x" + std::to_string(g.iw) + " (the own " + isa_name(isa) +
           " kernels: at least 2 rows and columns, the width a multiple of " +
           std::to_string(tile_pixels(isa, g.ic)) + ")";
  return {};
}

/// What the forward kernel does to each register tile of sums before it
/// stores it, in inference (forward_inference): + bias[c] (if any), + the
/// residual term at the same place (an image laid out as y; may be y
/// itself), then the ReLU if relu, as 0 > v ? 0 : v (a NaN stays NaN, as
/// the reference backend's ReLU keeps it; oneDNN 2.6's AVX2 ReLU post-op
/// gives 0 for it).
struct StoreEpilogue {
  const float* bias = nullptr;
  const float* sum = nullptr;
  bool relu = false;
};

/// A convolution of whole images that forward_images and backward_images
/// run in place of their direct forward kernel (the forward, and on dy the
/// data gradient), each thread on a chunk of at most `images` images at a
/// time with `work_floats` floats of work space of its own: the own
/// Winograd kernels where Winograd is asked for
/// (winograd::Conv3x3::image_conv; this file does not include them).
/// run(self, n, h, w, x, y, work): y = the convolution of n images of h x w
/// pixels, NHWC, on the calling thread.
struct ImageConv {
  const void* self = nullptr;
  void (*run)(const void* self, int n, int h, int w, const float* x, float* y, float* work) = nullptr;
  std::size_t images = 1;
  std::size_t work_floats = 0;
};

#if CIFARNET_DIRECT_X86
namespace kernels {

// The kernel bodies (direct_conv_kernels.hpp) once per instruction set.
namespace avx512 {
#define CIFARNET_DK __attribute__((target("avx512f")))
struct Vec {
  using V = __m512;
  static constexpr int L = 16;
  CIFARNET_DK static V load(const float* p) { return _mm512_loadu_ps(p); }
  CIFARNET_DK static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  CIFARNET_DK static V set1(float f) { return _mm512_set1_ps(f); }
  CIFARNET_DK static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  CIFARNET_DK static V add(V a, V b) { return _mm512_add_ps(a, b); }
  CIFARNET_DK static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  CIFARNET_DK static V max(V a, V b) { return _mm512_max_ps(a, b); }  // a > b ? a : b
  CIFARNET_DK static V zero() { return _mm512_setzero_ps(); }
};
#include "cifarnet/backend/onednn/direct_conv_kernels.hpp"  // NOLINT(build/include): included per ISA
#undef CIFARNET_DK
}  // namespace avx512
namespace avx2 {
#define CIFARNET_DK __attribute__((target("avx2,fma")))
struct Vec {
  using V = __m256;
  static constexpr int L = 8;
  CIFARNET_DK static V load(const float* p) { return _mm256_loadu_ps(p); }
  CIFARNET_DK static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  CIFARNET_DK static V set1(float f) { return _mm256_set1_ps(f); }
  CIFARNET_DK static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  CIFARNET_DK static V add(V a, V b) { return _mm256_add_ps(a, b); }
  CIFARNET_DK static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  CIFARNET_DK static V max(V a, V b) { return _mm256_max_ps(a, b); }  // a > b ? a : b
  CIFARNET_DK static V zero() { return _mm256_setzero_ps(); }
};
#include "cifarnet/backend/onednn/direct_conv_kernels.hpp"  // NOLINT(build/include): included per ISA
#undef CIFARNET_DK
}  // namespace avx2

// Each instruction set's tiles for C channels: the forward's P pixels x Q
// vectors (32 AVX-512 registers: 16 accumulators; 16 AVX2 registers: 12,
// or 8 where 8 x 8 images make 6-pixel tiles leave a short one), the weight
// gradient's 3 kernel columns x CI input channels x Q vectors (AVX-512, 16
// channels: one vector of input channels times 8 output channels). The
// AVX2 shapes were the fastest of those tried on a Zen 2 EPYC, one thread
// (forward 16/32 channels: 6 x 2 1.2x 4 x 2's rate; docs/runs/bench/
// 2026-12-03-avx2-masked-selects/probes/).
struct Avx512 {
  template <int C>
  static void forward(int H, int W, const float* x, const float* w, float* y,
                      const StoreEpilogue* o = nullptr) {
    avx512::forward_image<C, int(tile_pixels(Isa::Avx512, C)), C == 16 ? 1 : 2, false>(H, W, x, w, y, o);
  }
  template <int C>
  static void wgrad(int H, int W, const float* x, const float* dy, float* dw) {
    if constexpr (C == 16)
      avx512::wgrad_row_image<8>(H, W, x, dy, dw);
    else if constexpr (C == 32)
      avx512::wgrad_image<32, 4, 2>(H, W, x, dy, dw);
    else
      avx512::wgrad_image<64, 2, 4>(H, W, x, dy, dw);
  }
};
struct Avx2 {
  template <int C>
  static void forward(int H, int W, const float* x, const float* w, float* y,
                      const StoreEpilogue* o = nullptr) {
    if constexpr (C == 64)
      avx2::forward_image<64, 8, 1, true>(H, W, x, w, y, o);
    else
      avx2::forward_image<C, 6, 2, true>(H, W, x, w, y, o);
  }
  template <int C>
  static void wgrad(int H, int W, const float* x, const float* dy, float* dw) {
    if constexpr (C == 16)
      avx2::wgrad_image<16, 4, 1>(H, W, x, dy, dw);
    else
      avx2::wgrad_image<C, 2, 2>(H, W, x, dy, dw);
  }
};

// The epilogue on one image of dx just computed (dx: that image; off: its
// offset from the range's first element): the residual sum in place, then
// the earlier batch norm's sums added into s (2C: this thread's).
template <int C>
void epilogue(std::size_t rows, const BnEpilogue& e, std::size_t off, float* dx, double* s) {
  const std::size_t n = rows * C;
  if (e.other) {
    const float* o = e.other + off;
    if (e.mask_relu) {
      const float* m = e.mask_relu + off;
      for (std::size_t i = 0; i < n; ++i) dx[i] = host::keep_if(m[i] > 0.f, dx[i] + o[i]);
    } else {
      for (std::size_t i = 0; i < n; i += 16)
        host::add_masked_word(dx + i, o + i,
                              e.mask_bits ? e.mask_bits[(off + i) / 16] : std::uint16_t(0xFFFF), dx + i);
    }
  }
  if (e.sums)
    bn::nhwc_sums<bn::SumKind::Grad, std::size_t(C), float, float>(0, rows, e.x + off, dx, e.relu_ab, e.mean,
                                                                   s, s + C, nullptr);
}

// One image of a normalised input (NormMap; off: its offset) into xn.
template <int C>
void normalise(std::size_t rows, const NormMap& in, std::size_t off, float* xn) {
  float ac[C], bc[C];
  for (int c = 0; c < C; ++c) {
    ac[c] = in.a[c];
    bc[c] = in.b[c];
  }
  for (std::size_t r = 0; r < rows; ++r) {
    bn::ahead(in.x + off + r * C);
    bn::affine_row<std::size_t(C)>(C, in.x + off + r * C, ac, bc, xn + r * C, in.relu);
  }
}

// One image's forward for C channels (image at `off`): its input normalised
// into xn first where given as a map (`in`), then y; with `s`, its batch
// norm sums (shifted by its first pixel) into s (2C).
template <class K, int C>
void forward_one(int H, int W, const float* x, const NormMap* in, std::size_t off, const float* w, float* y,
                 float* xn, double* s) {
  const std::size_t rows = std::size_t(H) * W;
  const float* xi = x + off;
  if (in) {
    normalise<C>(rows, *in, off, xn);
    xi = xn;
  }
  K::template forward<C>(H, W, xi, w, y + off);
  const float* none = nullptr;
  if (s)
    bn::nhwc_sums<bn::SumKind::Stats, std::size_t(C)>(0, rows, y + off, none, nullptr, y + off, s, s + C,
                                                      nullptr);
}

// One image of dy (`rows` pixels at `off`) from the batch norm's map into
// dyc.
template <int C>
void gradient_rows(std::size_t rows, const BnGradMap& m, std::size_t off, float* dyc) {
  float ac[C], bc[C], dc[C], mc[C], ra[C], rb[C];
  for (int c = 0; c < C; ++c) {
    ac[c] = m.A[c];
    bc[c] = m.B[c];
    dc[c] = m.D[c];
    mc[c] = m.mean[c];
    ra[c] = m.relu_ab ? m.relu_ab[c] : 0.f;
    rb[c] = m.relu_ab ? m.relu_ab[C + c] : 0.f;
  }
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t at = off + r * C;
    bn::ahead(m.x + at);
    bn::ahead(m.dy + at);
    bn::input_gradient_row<C>(C, m.x + at, m.dy + at, m.relu_ab ? ra : nullptr, rb, mc, ac, bc, dc,
                              dyc + r * C);
  }
}

// One image's backward for C channels: dy from the map into `dyc`, then dx
// (if any; then the epilogue `e` on it, if any) and this thread's weight
// gradient (if any; its input x, or with `in` that image normalised into
// xn first).
template <class K, int C>
void image(int H, int W, const BnGradMap& m, std::size_t off, const float* x, const float* wf, float* dx,
           float* dw, float* dyc, const BnEpilogue* e, double* esums, const NormMap* in, float* xn) {
  const std::size_t rows = std::size_t(H) * W;
  gradient_rows<C>(rows, m, off, dyc);
  if (dx) K::template forward<C>(H, W, dyc, wf, dx);
  if (dx && e) epilogue<C>(rows, *e, off, dx, esums);
  if (dw && in) {
    normalise<C>(rows, *in, off, xn);
    x = xn;
  }
  if (dw) K::template wgrad<C>(H, W, x, dyc, dw);
}

// forward_one for `count` images at `off` with the forward of `conv` (the
// own Winograd) in place of the forward kernel: the images normalised into
// xn first where given as a map, then y of them all in one call, then each
// image's batch norm sums into s (2C an image) while they are in cache.
template <int C>
void forward_chunk(const ImageConv& conv, int H, int W, std::size_t count, const float* x, const NormMap* in,
                   std::size_t off, float* y, float* xn, float* work, double* s) {
  const std::size_t rows = std::size_t(H) * W, image = rows * C;
  const float* xi = x + off;
  if (in) {
    for (std::size_t i = 0; i < count; ++i) normalise<C>(rows, *in, off + i * image, xn + i * image);
    xi = xn;
  }
  conv.run(conv.self, int(count), H, W, xi, y + off, work);
  const float* none = nullptr;
  if (s)
    for (std::size_t i = 0; i < count; ++i) {
      const float* yi = y + off + i * image;
      double* si = s + i * 2 * C;
      bn::nhwc_sums<bn::SumKind::Stats, std::size_t(C)>(0, rows, yi, none, nullptr, yi, si, si + C, nullptr);
    }
}

// image() for `count` images at `off` with the data gradient as `conv`'s
// forward of dy (the own Winograd on flipped weights): each image's dy into
// dyc (count images), dx of them all in one call, then per image the
// epilogue and this thread's weight gradient in the direct kernel K.
template <class K, int C>
void images_chunk(const ImageConv& conv, int H, int W, std::size_t count, const BnGradMap& m, std::size_t off,
                  const float* x, float* dx, float* dw, float* dyc, const BnEpilogue* e, double* esums,
                  const NormMap* in, float* xn, float* work) {
  const std::size_t rows = std::size_t(H) * W, image = rows * C;
  for (std::size_t i = 0; i < count; ++i) gradient_rows<C>(rows, m, off + i * image, dyc + i * image);
  if (dx) {
    conv.run(conv.self, int(count), H, W, dyc, dx, work);
    if (e)
      for (std::size_t i = 0; i < count; ++i) epilogue<C>(rows, *e, off + i * image, dx + i * image, esums);
  }
  if (!dw) return;
  for (std::size_t i = 0; i < count; ++i) {
    const float* xi = x ? x + i * image : nullptr;
    if (in) {
      normalise<C>(rows, *in, off + i * image, xn);
      xi = xn;
    }
    K::template wgrad<C>(H, W, xi, dyc + i * image, dw);
  }
}

// f(K{}, std::integral_constant<int, C>{}) for the instruction set's
// kernels K (Avx512 or Avx2) and the channel count c (16, 32 or 64).
template <class F>
void dispatch(bool avx512, int c, F&& f) {
  auto on = [&](auto k) {
    if (c == 16)
      f(k, std::integral_constant<int, 16>{});
    else if (c == 32)
      f(k, std::integral_constant<int, 32>{});
    else
      f(k, std::integral_constant<int, 64>{});
  };
  if (avx512)
    on(Avx512{});
  else
    on(Avx2{});
}

}  // namespace kernels
#endif

/// The buffers of backward_images, kept between calls (a step allocates
/// nothing here once the sizes are known).
struct Scratch {
  std::vector<float> dyc;      ///< per thread: one image of dy (an ImageConv's chunk of them)
  std::vector<float> partial;  ///< per thread: its weight gradient (9 C C)
  std::vector<double> sums;    ///< per thread: the epilogue's batch norm sums (2 C)
  std::vector<double> stats;   ///< per image: forward_images' sums (2 C)
  std::vector<float> xn;       ///< per thread: one image of a normalised input (NormMap; a chunk)
  std::vector<float> work;     ///< per thread: an ImageConv's work space
};

/// The forward of g.n images (supports(g)): y = conv(x, w), w HWIO, in the
/// forward kernel (the one backward data runs on flipped weights), each
/// thread a fixed share of the images. With `stats` (2C), each image's
/// batch norm statistics are taken while it is in cache: the sums of y − k
/// and (y − k)² per channel, k the image's first pixel, as the batch norm's
/// own pass sums (float blocks of 16 rows added into double), turned into
/// the image's mean and sum of squared deviations and merged in image order
/// (Chan, Golub and LeVeque's pairwise update), written as the batch's
/// means then biased variances: the result depends on the data alone (not
/// on the thread count), and the batch norm after the convolution skips its
/// pass of the statistics (bn::forward_train's `given`). With `in`, x is
/// not read: each image of the input is computed from that map into a
/// buffer of the thread first (an earlier batch norm's output never
/// stored). With `conv`, y comes from it instead of the forward kernel,
/// each thread taking chunks of conv->images whole images (their inputs
/// normalised first where `in`, their statistics taken after): the
/// statistics as above, of its y.
inline void forward_images(const ConvGeom& g, const float* x, const float* w, float* y, Scratch& sc,
                           double* stats, const NormMap* in = nullptr, const ImageConv* conv = nullptr) {
  if (!supports(g)) throw std::logic_error("direct::forward_images: a geometry the kernels do not run");
  if (in && (!in->x || !in->a || !in->b))
    throw std::logic_error("direct::forward_images: a normalised input without its map");
  if (conv && !conv->run)
    throw std::logic_error("direct::forward_images: an image convolution without its run");
#if CIFARNET_DIRECT_X86
  const int C = int(g.ic), H = int(g.ih), W = int(g.iw);
  const std::size_t image = std::size_t(H) * W * C, rows = std::size_t(H) * W;
  const std::ptrdiff_t n = std::ptrdiff_t(g.n);
  const int nt = omp_get_max_threads();
  const bool avx512 = cpu_isa() == Isa::Avx512;
  const std::size_t per = conv ? std::max<std::size_t>(conv->images, 1) : 1;  // images a chunk
  if (stats) sc.stats.assign(g.n * 2 * std::size_t(C), 0.0);
  if (in) sc.xn.resize(std::size_t(nt) * image * per);
  if (conv) {
    sc.work.resize(std::size_t(nt) * conv->work_floats);
    const std::ptrdiff_t chunks = std::ptrdiff_t((g.n + per - 1) / per);
#pragma omp parallel num_threads(nt)
    {
      const std::size_t t = std::size_t(omp_get_thread_num());
      float* xn = in ? sc.xn.data() + t * image * per : nullptr;
      float* work = sc.work.data() + t * conv->work_floats;
#pragma omp for schedule(static)
      for (std::ptrdiff_t j = 0; j < chunks; ++j) {
        const std::size_t i0 = std::size_t(j) * per, count = std::min(per, g.n - i0);
        double* s = stats ? sc.stats.data() + i0 * 2 * C : nullptr;
        kernels::dispatch(avx512, C, [&](auto, auto c) {
          kernels::forward_chunk<decltype(c)::value>(*conv, H, W, count, x, in, i0 * image, y, xn, work, s);
        });
      }
    }
  } else {
#pragma omp parallel num_threads(nt)
    {
      float* xn = in ? sc.xn.data() + std::size_t(omp_get_thread_num()) * image : nullptr;
#pragma omp for schedule(static)
      for (std::ptrdiff_t i = 0; i < n; ++i) {
        const std::size_t off = std::size_t(i) * image;
        double* s = stats ? sc.stats.data() + std::size_t(i) * 2 * C : nullptr;
        kernels::dispatch(avx512, C, [&](auto k, auto c) {
          kernels::forward_one<decltype(k), decltype(c)::value>(H, W, x, in, off, w, y, xn, s);
        });
      }
    }
  }
  if (!stats) return;
  const double m = double(rows);
  for (int c = 0; c < C; ++c) {
    double count = 0, mean = 0, m2 = 0;
    for (std::ptrdiff_t i = 0; i < n; ++i) {
      const double* s = sc.stats.data() + std::size_t(i) * 2 * C;
      const double k = double(y[std::size_t(i) * image + std::size_t(c)]), d = s[c] / m;
      const double mi = k + d, m2i = std::max(0.0, s[C + c] - s[c] * d);
      if (count == 0) {
        mean = mi;
        m2 = m2i;
      } else {
        const double delta = mi - mean, total = count + m;
        mean += delta * (m / total);
        m2 += m2i + delta * delta * (count * m / total);
      }
      count += m;
    }
    stats[c] = mean;
    stats[C + c] = m2 / count;
  }
#else
  (void)x, (void)w, (void)y, (void)sc, (void)stats, (void)in, (void)conv;  // supports() is false off x86-64
#endif
}

/// Why forward_inference does not run `g` with `threads` threads, in
/// words; empty when it does: supports(g), float products, the AVX2
/// kernels, and at least as many images as threads (the kernels give each
/// thread whole images; oneDNN's splits one image among them, the faster
/// way to run a batch of one). On a 2-core Zen 2 EPYC the AVX2 forward ran
/// 1.4-1.6x oneDNN 2.6's AVX2 inference convolution at 16 channels, 1.0-1.7x
/// at 32, 0.9-1.6x at 64 (a noisy VM; one thread: 1.5x, 1.0-1.2x, 1.0x;
/// docs/runs/bench/2026-12-03-avx2-inference-kernel/probes/). On a 2-core
/// Zen 4 EPYC, whose AVX-512 runs in 256-bit halves, the AVX-512 forward ran
/// ResNet's 16-channel stage 1.1x oneDNN's AVX-512 kernel
/// (docs/runs/bench/2026-12-06-zen4-own-inference/); on AVX-512 with
/// full-width units the two were not compared in inference: oneDNN's kernel
/// runs there (own_inference_measured).
inline std::string inference_why_not(const ConvGeom& g, bool bf16, int threads) {
  if (bf16) return "bf16 products (the own kernels are float)";
  std::string why = why_not(g);
  if (!why.empty()) return why;
  if (!own_inference_measured())
    return "AVX-512 on full-width units: oneDNN's kernel (the own forward measured ahead of it in inference "
           "on AVX2 and on Zen 4's AVX-512 in halves only)";
  if (g.n < std::size_t(threads))
    return "a batch of " + std::to_string(g.n) + " on " + std::to_string(threads) +
           " threads (the own kernels give each thread whole images)";
  return {};
}

/// The inference forward of g.n images (supports(g)): y = [max(., 0)]
/// (conv(x, w) + b [+ s]), w HWIO, b (may be null) per output channel, s
/// (may be null; may be y itself) the residual sum's other term laid out as
/// y, each thread a fixed share of the images, the bias, sum and ReLU added
/// to each register tile before it is stored (StoreEpilogue).
inline void forward_inference(const ConvGeom& g, const float* x, const float* w, const float* b,
                              const float* s, float* y, bool relu) {
  if (!supports(g)) throw std::logic_error("direct::forward_inference: a geometry the kernels do not run");
#if CIFARNET_DIRECT_X86
  const int C = int(g.ic), H = int(g.ih), W = int(g.iw);
  const std::size_t image = std::size_t(H) * W * C;
  const std::ptrdiff_t n = std::ptrdiff_t(g.n);
  const bool avx512 = cpu_isa() == Isa::Avx512;
#pragma omp parallel for schedule(static) num_threads(omp_get_max_threads())
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    const std::size_t off = std::size_t(i) * image;
    const StoreEpilogue o{b, s ? s + off : nullptr, relu};
    kernels::dispatch(avx512, C, [&](auto k, auto c) {
      decltype(k)::template forward<decltype(c)::value>(H, W, x + off, w, y + off, &o);
    });
  }
#else
  (void)x, (void)w, (void)b, (void)s, (void)y, (void)relu;                 // supports() is false off x86-64
#endif
}

/// The backward of a range of g.n images (supports(g)): dy of each image
/// from the batch norm's map `m` (pointers at the range's first image),
/// then dx (if not null; from the weights flipped and transposed, `wf`:
/// FlippedWeights in conv2d.hpp) and the weight gradient dw (HWIO, if not
/// null; overwritten) from x (the convolution's input of those images).
/// With `e` (and dx), each image of dx then goes through the epilogue while
/// it is in cache (bn::GradEpilogue: pointers at the range's first image).
/// With `in`, x is not read: the weight gradient's input is each image
/// computed from that map into a buffer of the thread first. With `conv`,
/// each thread takes chunks of conv->images images: their dy first, then
/// dx of them all from conv (dy's forward with the flipped weights: `wf`
/// unused), then per image the epilogue and the weight gradient; without
/// dx, conv->run may be null (the chunks alone: the weight gradient's
/// bits do not depend on whether dx was asked for).
inline void backward_images(const ConvGeom& g, const float* x, const BnGradMap& m, const float* wf, float* dx,
                            float* dw, Scratch& sc, const BnEpilogue* e = nullptr,
                            const NormMap* in = nullptr, const ImageConv* conv = nullptr) {
  if (!supports(g)) throw std::logic_error("direct::backward_images: a geometry the kernels do not run");
  if (e && (!dx || (e->sums && (!e->x || !e->mean)) || ((e->mask_relu || e->mask_bits) && !e->other) ||
            (e->mask_relu && e->mask_bits)))
    throw std::logic_error("direct::backward_images: an epilogue without dx, or with its inputs missing");
  if (in && (!in->x || !in->a || !in->b))
    throw std::logic_error("direct::backward_images: a normalised input without its map");
  if (dx && conv && !conv->run)
    throw std::logic_error("direct::backward_images: an image convolution without its run");
  if (dx && !conv && !wf) throw std::logic_error("direct::backward_images: dx without the flipped weights");
#if CIFARNET_DIRECT_X86
  const int C = int(g.ic), H = int(g.ih), W = int(g.iw);
  const std::size_t image = std::size_t(H) * W * C, wsize = std::size_t(9) * C * C;
  const int nt = omp_get_max_threads();
  const bool avx512 = cpu_isa() == Isa::Avx512;
  const std::size_t per = conv ? std::max<std::size_t>(conv->images, 1) : 1;  // images a chunk
  sc.dyc.resize(std::size_t(nt) * image * per);
  if (dw) sc.partial.assign(std::size_t(nt) * wsize, 0.f);
  const bool sums = e && e->sums;
  if (sums) sc.sums.assign(std::size_t(nt) * 2 * C, 0.0);
  const NormMap* xin = dw ? in : nullptr;
  if (xin) sc.xn.resize(std::size_t(nt) * image);
  const std::ptrdiff_t n = std::ptrdiff_t(g.n);
  if (conv) {
    sc.work.resize(std::size_t(nt) * conv->work_floats);
    const std::ptrdiff_t chunks = std::ptrdiff_t((g.n + per - 1) / per);
#pragma omp parallel num_threads(nt)
    {
      const std::size_t t = std::size_t(omp_get_thread_num());
      float* dyc = sc.dyc.data() + t * image * per;
      float* xn = xin ? sc.xn.data() + t * image : nullptr;
      float* part = dw ? sc.partial.data() + t * wsize : nullptr;
      double* es = sums ? sc.sums.data() + t * 2 * C : nullptr;
      float* work = sc.work.data() + t * conv->work_floats;
#pragma omp for schedule(static)
      for (std::ptrdiff_t j = 0; j < chunks; ++j) {
        const std::size_t i0 = std::size_t(j) * per, count = std::min(per, g.n - i0), off = i0 * image;
        float* di = dx ? dx + off : nullptr;
        const float* xi = xin ? nullptr : x + off;
        kernels::dispatch(avx512, C, [&](auto k, auto c) {
          kernels::images_chunk<decltype(k), decltype(c)::value>(*conv, H, W, count, m, off, xi, di, part,
                                                                 dyc, e, es, xin, xn, work);
        });
      }
    }
  } else {
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num();
      float* dyc = sc.dyc.data() + std::size_t(t) * image;
      float* xn = xin ? sc.xn.data() + std::size_t(t) * image : nullptr;
      float* part = dw ? sc.partial.data() + std::size_t(t) * wsize : nullptr;
      double* es = sums ? sc.sums.data() + std::size_t(t) * 2 * C : nullptr;
#pragma omp for schedule(static)
      for (std::ptrdiff_t i = 0; i < n; ++i) {
        const std::size_t off = std::size_t(i) * image;
        float* di = dx ? dx + off : nullptr;
        const float* xi = xin ? nullptr : x + off;
        kernels::dispatch(avx512, C, [&](auto k, auto c) {
          kernels::image<decltype(k), decltype(c)::value>(H, W, m, off, xi, wf, di, part, dyc, e, es, xin,
                                                          xn);
        });
      }
    }
  }
  if (sums) {
    for (int j = 0; j < 2 * C; ++j) {
      double s = 0.0;
      for (int t = 0; t < nt; ++t) s += sc.sums[std::size_t(t) * 2 * C + std::size_t(j)];
      e->sums[j] += s;
    }
  }
  if (dw) {
    for (std::size_t k = 0; k < wsize; ++k) {
      float s = sc.partial[k];
      for (int t = 1; t < nt; ++t) s += sc.partial[std::size_t(t) * wsize + k];
      dw[k] = s;
    }
  }
#else
  (void)x, (void)m, (void)wf, (void)dx, (void)dw, (void)sc, (void)e, (void)in, (void)conv;  // not off x86-64
#endif
}

}  // namespace direct
}  // namespace onednn
}  // namespace backend
}  // namespace cifarnet
