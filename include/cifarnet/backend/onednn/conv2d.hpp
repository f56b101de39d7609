// cifarnet/backend/onednn/conv2d.hpp — 2-D convolution on oneDNN (float):
// convolution_forward (direct, forward_training), backward_data and
// backward_weights, built once per geometry and kept in the op's cache.
//
// Activations stay in the plain nchw/nhwc layout of the geometry. The weights
// descriptor is format_tag::any: the caller's HWIO weights are reordered into
// the primitive's layout, and that copy is reused for as long as the
// caller's buffer and Parameters::version are unchanged (set_weights_version;
// the layers pass it, so an optimizer step or any other write through
// Parameters is seen; without a version every call reorders); weight
// gradients come back into HWIO.
// Padding may be asymmetric: padding_l = {pt, pl}, padding_r = {pb, pr}.
// oneDNN 2.6 workaround: the jit_1x1 backward_weights kernels index their
// reduce-to-unit-stride buffer with the channel block instead of the channel
// count for nhwc sources, so 1x1 strided convolutions with few input channels
// write past it (SIGSEGV or wrong weights; oneDNN issue #6035). For nhwc 1x1
// convolutions with a stride or padding, backward_weights skips the jit_1x1
// implementations and takes the next one oneDNN offers.
//
// Algorithm (set_algorithm, from NetOptions::conv_algorithm; Direct unless
// set): with Winograd chosen for a geometry (ops/conv_algorithm.hpp), forward
// and backward_data use oneDNN's Winograd kernels, which need blocked
// activations: the plain input is reordered into a blocked scratch buffer
// and the blocked result back into the caller's plain buffer (two device
// scratch slots shared by every op, so no per-layer copies are kept).
// Where oneDNN offers no Winograd kernel for a geometry (oneDNN 2.6 has
// them on AVX-512 only), or the CPU runs AVX-512 in 256-bit halves (Zen 4,
// where the own kernels were measured faster), and the project's own do
// (winograd.hpp: NHWC, SAME-padded, channel counts multiples of 16, AVX2),
// forward and backward_data run those (their transformed weights kept per layer, their
// work space in device scratch slot 0, shared by every layer); elsewhere
// the op falls back to direct.
// backward_weights is always direct.
//
// Precision (set_precision, from NetOptions::conv_precision; F32 unless
// set): with BF16 each pass runs oneDNN's bf16 kernel where it has a
// jit (non-reference) one: the float input and output gradient are rounded
// to bf16 by a reorder into a bf16 copy, the weights into the primitive's
// bf16 layout (cached like the float copy), and the primitive accumulates
// in float and writes float y, dx and dw. Each pass falls back to float on
// its own where oneDNN has no bf16 kernel (every pass on CPUs without
// AVX-512). Where Winograd is chosen on AVX2 and Zen 4 CPUs, forward and
// backward_data of the own Winograd kernels' geometries run those float
// kernels instead (float_winograd_in_bf16). backward_weights stays float
// for inputs of fewer than 8 channels, and for strided convolutions except
// where oneDNN runs bf16 on AMX or the own AVX512-BF16 kernel takes them
// (below): oneDNN's bf16 kernels are slower than float there (measured on
// Zen 4, batch 128: 3.3-4.5x on ResNet's two stride-2 3x3 convolutions,
// 1.3x on the 3-channel stem; faster elsewhere), while on a 2-core AMX
// Xeon the two stride-2 ones took 0.64 and 0.87 ms in bf16 (with the
// rounding of dy) against 0.89 and 0.91 in float (docs/BENCHMARKS.md,
// 2026-11-27 11:28).
// On images of at most 7x7 pixels with 128 or more output channels (NHWC,
// stride 1, no bias), the bf16 weight gradient is a oneDNN bf16 matmul
// over an im2col copy instead: dw[(kh, kw, ic), oc] = col(x)ᵀ · dy, the
// im2col of about 16 MiB of images at a time (device scratch slot 0) and
// each chunk's product summed into dw; only where oneDNN's matmul runs on
// AMX. oneDNN 2.6's bf16 backward_weights kernel (it has no brgemm one) is
// slow there: on a 2-core AMX Xeon, 256 -> 256 channels at batch 500 took
// 41.8 ms on 7x7 and 20.6 ms on 3x3; with this path the layers' whole
// backward (weights and data) went from 58.7 to 42.6 ms and from 29.5 to
// 14.5 ms (docs/BENCHMARKS.md). Float accumulation in both.
// Where the CPU has AMX, a bf16 weight gradient (NHWC, stride 1 or 2, no
// bias, input channels a multiple of 8, output channels of 16) runs in the
// project's own AMX kernel (amx_wgrad.hpp) instead of either (airbench94's
// 24 -> 64 at batch 500: 17.2-17.5 against oneDNN's 20.4-20.8 ms, with the
// op's rounding of dy, docs/BENCHMARKS.md, 2026-12-04 09:52): on a 2-core
// AMX Xeon, batch 128,
// ResNet-20's 3x3 at 16, 32 and 64 channels took 0.65, 0.48 and 0.46 ms
// against oneDNN's 0.99, 0.61 and 1.07 ms (both with the rounding of a float
// dy; docs/BENCHMARKS.md, 2026-11-27 11:28); its two stride-2 ones (16 -> 32
// and 32 -> 64, padding 1) 0.63 / 0.64 and 0.41 / 0.50 ms against 0.85 /
// 0.75 and 1.15 / 1.04 ms (docs/BENCHMARKS.md, 2026-11-27 17:40).
// Where the CPU has AVX512-BF16 but no AMX (AMD's Zen 4), the same
// geometries' bf16 weight gradient runs in the project's own AVX512-BF16
// kernel (bf16_wgrad.hpp) instead, strided ones too (which thus run in bf16
// rather than float): on a 2-core Zen 4 EPYC, batch 500, airbench94's 64 ->
// 256 at 15x15 took 82.6 ms against oneDNN's 113.7 ms, ResNet-20's stride-2
// 32 -> 64 at batch 128 0.78 ms against 1.49 ms in float, both with the
// op's rounding of dy (docs/BENCHMARKS.md, 2026-12-06 13:37).
// A bf16 training forward whose input is a batch norm's output that was
// never written (forward_bf16_mapped: the batch norm's input bits and its
// map, ConvBatchNorm's bn_output_into_next_conv) runs in the project's own
// AMX forward kernel (amx_conv.hpp: NHWC, 3x3, stride 1, padding 1, 16 or a
// multiple of 32 channels in and out), which applies the map while it
// copies its input; the training forward keeps the bits and a copy of the
// map, and the weight gradient (the own AMX kernel, required) applies it
// again. x itself is never read: its pointer only names the input.
// A bf16 backward_data of a stride-1 convolution with an odd kernel and
// SAME padding runs as oneDNN's bf16 forward convolution of dy with the
// weights flipped in space and transposed (in and out channels swapped) and
// the same padding: the same sum of the same bf16 products, in another
// float order.
// oneDNN 2.6's forward kernels are brgemm ones on AMX, its backward_data
// kernels are not: on a 2-core AMX Xeon, batch 128, ResNet-20's 16 -> 16
// 3x3 at 32x32 took 0.79 ms as backward_data and 0.69 ms as forward, 64 ->
// 64 at 8x8 0.39 and 0.30 ms (docs/BENCHMARKS.md, 2026-11-27 11:28). The
// flipped float copy is remade when the weights' buffer or
// Parameters::version changes, then reordered like the weights.
// Likewise a bf16 backward_data of ResNet's stride-2 3x3 convolution (NHWC,
// padding 1 before, even image sizes, 16 or more input channels) runs as two
// bf16 forward convolutions of dy, one per row phase of dx, whose rows are
// then copied into dx (State::phases_backward has the numbers).
// Each of these bf16 backward_data passes (the forward of dy, the phases,
// or oneDNN's backward_data kernel, as ResNet's 16 -> 32 stride-2 runs) can
// write dx as bf16 instead (writes_bf16_dx: the same pass with a bf16
// output and the same weights' layout, built on first request; the float
// dx rounded once, in the kernel), for the layer or sum that reads dx as
// bf16 (a batch norm's dy; a residual block's gradient sum).
// While training (set_keep_input), forward keeps its bf16 copy of x for a
// bf16 backward_weights of the same x (pointer compared), so x is rounded
// once per step; backward() rounds dy once for both backward passes.
// Three hand-overs skip those roundings where the neighbouring layer can
// write bf16 itself in a pass it makes anyway (layers/conv_bn.hpp,
// layers/batch_norm.hpp): set_bf16_input (a bf16 copy of x written with x,
// kept by pointer), forward_bf16_dst (y written as bf16), and bf16_dy +
// backward_bf16_dy (dy written as bf16 straight into the buffer backward
// reads).
//
// dx, dw and db are overwritten; the bias is optional (nullptr) in forward
// and backward_weights.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cifarnet/backend/onednn/amx_conv.hpp"
#include "cifarnet/backend/onednn/amx_wgrad.hpp"
#include "cifarnet/backend/onednn/bf16_wgrad.hpp"
#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/backend/onednn/direct_conv.hpp"
#include "cifarnet/backend/onednn/winograd.hpp"
#include "cifarnet/ops/conv_algorithm.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace backend {
namespace onednn {

/// Whether the own AVX512-BF16 weight gradient (bf16_wgrad.hpp) runs here:
/// no AMX (the AMX kernel runs there), AVX512-BF16, and oneDNN at AVX-512
/// (its ONEDNN_MAX_CPU_ISA caps this kernel too). Where it does, a bf16
/// weight gradient of a strided NHWC convolution it takes runs in bf16.
inline bool cpu_has_own_bf16_weights() {
  return !amx::amx_available() && direct::cpu_isa() == direct::Isa::Avx512 && bf16dot::available();
}
/// A convolution's weights flipped in (kh, kw) and transposed in (ci, co):
/// HWIO with I = oc and O = ic, the weights of dx as a forward convolution
/// of dy (stride 1). Remade only when the caller's weights change (another
/// buffer, or another Parameters version; version 0: unknown, always).
struct FlippedWeights {
  std::vector<float> w;
  const float* of = nullptr;
  std::uint64_t version = 0;
  /// w from the caller's HWIO `src` of g's kernel and channels, unless it
  /// holds them at this version; true when it was rewritten. w keeps its
  /// buffer once sized (a memory bound to it stays valid).
  bool update(const ConvGeom& g, const float* src, std::uint64_t v) {
    if (v != 0 && of == src && version == v) return false;
    const std::size_t KH = g.kh, KW = g.kw, I = g.ic, O = g.oc;
    w.resize(KH * KW * I * O);
    // Every training step rewrites it (the weights move): the taps shared
    // among the threads, as the main thread alone kept the other waiting
    // (docs/BENCHMARKS.md, 2026-12-05 07:40).
    float* dst = w.data();
    const long taps = long(KH * KW);
#pragma omp parallel for schedule(static) if (I * O >= 2048)
    for (long t = 0; t < taps; ++t) {
      const std::size_t i = std::size_t(t) / KW, j = std::size_t(t) % KW;
      const float* src_ij = src + ((KH - 1 - i) * KW + (KW - 1 - j)) * I * O;  // [c][o]
      float* dst_ij = dst + (i * KW + j) * O * I;                              // [o][c]
      for (std::size_t c = 0; c < I; ++c)
        for (std::size_t o = 0; o < O; ++o) dst_ij[o * I + c] = src_ij[c * O + o];
    }
    of = src;
    version = v;
    return true;
  }
};
}  // namespace onednn
}  // namespace backend

namespace ops {

/// Convolution with oneDNN primitives cached per ConvGeom (float only).
template <class T>
struct Conv2d<backend::OneDnn, T> {
  CIFARNET_ONEDNN_FLOAT_ONLY(Conv2d, T);
  using Dev = Device<backend::OneDnn>;

  /// The algorithm policy for the calls that follow (default Direct).
  CIFARNET_OUTLINE void set_algorithm(ConvAlgorithm a) { alg_ = a; }
  CIFARNET_OUTLINE ConvAlgorithm algorithm() const { return alg_; }
  /// Whether the last geometry run uses Winograd (forward / backward_data).
  CIFARNET_OUTLINE bool uses_winograd(const ConvGeom& g) const {
    const State* s = cache_.find(key(g));
    return s && s->wino;
  }

  /// Whether geometry `g`'s forward and backward_data run the own Winograd
  /// kernels (winograd.hpp; decided at the first call of `g`).
  CIFARNET_OUTLINE bool uses_own_winograd(const ConvGeom& g) const {
    const State* s = cache_.find(key(g));
    return s && s->own_wino != nullptr;
  }
  /// How many forward and backward_data calls ran the own Winograd kernels
  /// (tests).
  CIFARNET_OUTLINE std::size_t own_winograd_calls() const { return own_wino_calls_; }

  /// Winograd for this geometry under the policy `a` (oneDNN may still
  /// refuse): 3x3 stride 1, asked, or Auto at a batch of 4 or fewer. Float
  /// calls only (bf16 ones are direct, except float_winograd_in_bf16).
  CIFARNET_OUTLINE static bool want_winograd(ConvAlgorithm a, const ConvGeom& g) {
    const bool shape_ok = g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1;
    return shape_ok && (a == ConvAlgorithm::Winograd || (a == ConvAlgorithm::Auto && g.n <= 4));
  }

  /// Whether a bf16 convolution for which Winograd is chosen
  /// (want_winograd) runs its forward and data gradient with float x, y, dy
  /// and dx in the own float Winograd kernels (winograd.hpp, where they take
  /// the geometry; not a forward given a bf16 copy of x, set_bf16_input)
  /// instead of a direct bf16 kernel: on AVX2, where oneDNN has no bf16
  /// kernel and its float fallback is direct, and on AVX-512 in 256-bit
  /// halves (Zen 4), where a quarter of the multiplies in float beat
  /// oneDNN's bf16 direct kernel on most of VGG-19's convolutions (the
  /// style transfer's step 1.16-1.32x as fast: docs/BENCHMARKS.md,
  /// 2026-12-06 16:27). Float products are at least as exact as bf16 ones.
  /// The weight gradient and the bf16 hand-overs (bf16 output, dy as bits,
  /// mapped input) stay bf16 direct; ConvAlgorithm::Direct keeps every pass
  /// bf16.
  CIFARNET_OUTLINE static bool float_winograd_in_bf16() {
    namespace d = backend::onednn::direct;
    return d::cpu_isa() == d::Isa::Avx2 || d::avx512_in_halves();
  }

  /// The arithmetic of the calls that follow (default F32).
  CIFARNET_OUTLINE void set_precision(ConvPrecision p) { prec_ = p; }
  CIFARNET_OUTLINE ConvPrecision precision() const { return prec_; }
  /// Whether forward keeps its bf16 copy of x for backward_weights (set
  /// while training; without it the copy lives in device scratch only).
  CIFARNET_OUTLINE void set_keep_input(bool keep) { keep_input_ = keep; }
  /// The bf16 copy of the x the next forward call gets (NHWC or NCHW as x,
  /// host::store_bf16's rounding), written by the layer that wrote x in the
  /// same pass: a bf16 pass reads it instead of rounding x itself, and keeps
  /// it by pointer for backward_weights (it must not change before then).
  /// nullptr (the default): none. Used by that one call only.
  CIFARNET_OUTLINE void set_bf16_input(const std::uint16_t* bits) { bf16_in_ = bits; }
  /// How many forward passes read a caller's bf16 copy of x (tests).
  CIFARNET_OUTLINE std::size_t bf16_inputs() const { return bf16_inputs_; }
  /// The Parameters::version of the weights the calls that follow get (0,
  /// the default: unknown, so every call reorders them). The reordered copy
  /// of the weights is reused while buffer and version stay the same.
  CIFARNET_OUTLINE void set_weights_version(std::uint64_t v) { w_version_ = v; }
  /// How many times the weights were reordered into a primitive's layout
  /// (or transformed for the own Winograd kernels).
  CIFARNET_OUTLINE std::size_t weight_reorders() const { return weight_reorders_; }
  /// Whether any pass built so far for geometry `g` runs in bf16.
  CIFARNET_OUTLINE bool uses_bf16(const ConvGeom& g) const {
    const State* s = cache_.find(key(g));
    if (!s) return false;
    bool any = (s->bwd_data && s->bwd_data->lp) || s->fwd_lp_dst.has_value();
    for (const auto& f : s->fwd) any = any || (f && f->lp);
    for (const auto& f : s->bwd_weights) any = any || (f && f->lp);
    return any;
  }

  /// Whether backward_weights for geometry `g` (without bias) runs as the
  /// im2col + bf16 matmul (see the file comment); false before it ran.
  CIFARNET_OUTLINE bool uses_gemm_weights(const ConvGeom& g) const {
    const State* s = cache_.find(key(g));
    return s && s->dw_gemm.has_value();
  }

  /// Bytes of im2col per chunk of the matmul weight gradient (default 16
  /// MiB; smaller makes more chunks: tests). Takes effect for geometries
  /// not seen yet.
  CIFARNET_OUTLINE void set_im2col_chunk_bytes(std::size_t bytes) {
    chunk_bytes_ = std::max<std::size_t>(bytes, 1);
  }

  /// Which geometries take the im2col + matmul weight gradient: at most
  /// `max_pixels` output pixels per image and at least `min_oc` output
  /// channels (the other conditions of the file comment stay). Takes effect
  /// for geometries not seen yet (benchmarks compare the two paths).
  CIFARNET_OUTLINE void set_gemm_weights_limits(std::size_t max_pixels, std::size_t min_oc) {
    gemm_max_pixels_ = max_pixels;
    gemm_min_oc_ = min_oc;
  }

  /// Whether a bf16 backward_data of a stride-1 geometry runs as oneDNN's
  /// bf16 *forward* convolution of dy with the flipped, transposed weights,
  /// and of a stride-2 3x3 one as two, by row phase of dx (default true; see
  /// the file comment). Takes effect for geometries not
  /// seen yet (benchmarks and tests compare the two paths).
  CIFARNET_OUTLINE void set_backward_data_via_forward(bool on) { bwd_via_fwd_ = on; }
  /// Whether geometry `g`'s backward_data runs as those forward convolutions.
  CIFARNET_OUTLINE bool uses_backward_data_via_forward(const ConvGeom& g) const {
    const State* s = cache_.find(key(g));
    return s && s->bwd_data && (s->bwd_data->as_fwd.has_value() || s->bwd_data->as_phases.has_value());
  }

  /// Whether the backward of a convolution whose output gradient is a batch
  /// norm's input gradient (backward_images_bn) runs in the project's own
  /// fp32 kernels with that gradient computed in their prologue
  /// (direct_conv.hpp; default true). False: never (benchmarks and tests
  /// compare the two paths).
  CIFARNET_OUTLINE void set_direct_kernels(bool on) { direct_ = on; }
  /// Whether backward_images_bn runs `g`: float convolutions and a
  /// geometry of the own kernels (direct::supports) on a CPU with them;
  /// where Winograd is asked for (the algorithm set), a CPU where the own
  /// kernels stand in for oneDNN's Winograd (direct::own_inference_measured:
  /// winograd_bn says which of its geometries then run Winograd inside them).
  CIFARNET_OUTLINE bool direct_bn(const ConvGeom& g) const {
    namespace on = backend::onednn;
    return direct_ && prec_ == ConvPrecision::F32 && on::direct::supports(g) &&
           (alg_ != ConvAlgorithm::Winograd || on::direct::own_inference_measured());
  }
  /// Whether forward_stats runs `g` under algorithm `a` (the one set, or
  /// about to be): direct_bn's geometry with the direct algorithm asked
  /// for, or Winograd asked for where the own kernels stand in for oneDNN's
  /// (Auto may pick oneDNN's Winograd, whose outputs differ; the forward
  /// then stays oneDNN's).
  CIFARNET_OUTLINE bool direct_forward(const ConvGeom& g, ConvAlgorithm a) const {
    namespace on = backend::onednn;
    return direct_ && prec_ == ConvPrecision::F32 && on::direct::supports(g) &&
           (a == ConvAlgorithm::Direct ||
            (a == ConvAlgorithm::Winograd && on::direct::own_inference_measured()));
  }
  /// Why direct_bn(g) (forward: direct_forward(g, a)) is false under
  /// algorithm `a` (the one a forward sets), in words; empty where it is
  /// true.
  CIFARNET_OUTLINE std::string direct_why_not(const ConvGeom& g, ConvAlgorithm a, bool forward) const {
    namespace on = backend::onednn;
    if (!direct_) return "NetOptions::direct_conv_bn is off";
    if (prec_ != ConvPrecision::F32) return "bf16 convolutions (the own kernels are float)";
    if (forward && a == ConvAlgorithm::Auto) return "Winograd convolutions (the own kernels are direct)";
    std::string why = on::direct::why_not(g);
    if (why.empty() && a == ConvAlgorithm::Winograd && !on::direct::own_inference_measured())
      why = "Winograd convolutions, " + on::winograd::bn_why_not(g);
    return why;
  }
  /// Whether forward_stats and backward_images_bn run `g` with the own
  /// Winograd kernels in place of the direct forward kernel (the forward,
  /// and the data gradient; the weight gradient stays direct): Winograd
  /// asked for, direct_bn(g) and winograd::bn_supports(g) (from 32
  /// channels; at 16 the direct kernels run).
  CIFARNET_OUTLINE bool winograd_bn(const ConvGeom& g) const {
    return alg_ == ConvAlgorithm::Winograd && direct_bn(g) && backend::onednn::winograd::bn_supports(g);
  }
  /// The backward of g.n images whose output gradient is the batch norm's
  /// input gradient given by its map `m` (BatchNorm::grad_map, at those
  /// images): dx (if not null) and dw (HWIO, overwritten, if not null) from
  /// x (their input) and w (HWIO), in the own kernels, each image's output
  /// gradient computed in their prologue and used from cache. Needs
  /// direct_bn(g). With `e` (and dx), each image of dx then goes through
  /// that epilogue while it is in cache: a residual sum, an earlier batch
  /// norm's backward sums (bn::GradEpilogue; pointers at those images).
  /// With `in`, x is not read: the input is an earlier batch norm's output
  /// given as its map, each image computed in the kernels for the weight
  /// gradient (ops::BnNormMap, at those images).
  using BnEpilogue = backend::onednn::bn::GradEpilogue;
  CIFARNET_OUTLINE void backward_images_bn(Dev& dev, const ConvGeom& g, const float* x,
                                           const backend::onednn::bn::GradMap& m, const float* w, float* dx,
                                           float* dw, const BnEpilogue* e = nullptr,
                                           const ops::BnNormMap<float>* in = nullptr) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d backward_images_bn";
    on::check_geometry(g, op, false);
    on::require(op, {{x, "x"}, {w, "w"}, {m.x, "the batch norm's x"}, {m.dy, "the batch norm's dy"}});
    (void)dev;
    if (!direct_bn(g))
      throw ConfigError(
          detail::concat(op, ": not a geometry of the own kernels here (", on::describe(g), ")"));
    if (winograd_bn(g)) {
      // The data gradient in the own Winograd kernels: dy's forward with
      // the flipped weights, transformed once per weights version. Without
      // dx, the same chunks of images (the weight gradient's bits do not
      // depend on whether dx is asked for).
      on::direct::ImageConv c;
      if (dx) {
        direct_wino_.set_backward_weights(g, w, w_version_);
        c = direct_wino_.bwd.image_conv(int(g.oh), int(g.ow));
        ++winograd_bn_calls_;
      } else {
        c.images = on::winograd::Conv3x3::images_per_call(g.oc, g.ic, int(g.oh), int(g.ow));
      }
      on::direct::backward_images(g, x, m, nullptr, dx, dw, direct_scratch_, e, in, &c);
    } else {
      if (dx) direct_flip_.update(g, w, w_version_);  // once per weights version
      on::direct::backward_images(g, x, m, dx ? direct_flip_.w.data() : nullptr, dx, dw, direct_scratch_, e,
                                  in);
    }
    ++direct_backwards_;
  }
  /// How many backward_images_bn calls ran (tests).
  CIFARNET_OUTLINE std::size_t direct_backwards() const { return direct_backwards_; }
  /// The training forward of a convolution whose output a batch norm
  /// normalises next (ConvBatchNorm), in the own kernels: y = conv(x, w) (w
  /// HWIO, no bias) and that batch norm's statistics of y (`stats`, 2 g.oc:
  /// means, then biased variances, in double) taken image by image while
  /// each is in cache (direct::forward_images), for
  /// BatchNorm::give_statistics. Needs direct_bn(g). With `in`, x is not
  /// read: the input is an earlier batch norm's output given as its map,
  /// each image computed in the kernels (ops::BnNormMap).
  CIFARNET_OUTLINE void forward_stats(Dev& dev, const ConvGeom& g, const float* x, const float* w, float* y,
                                      double* stats, const ops::BnNormMap<float>* in = nullptr) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d forward_stats";
    on::check_geometry(g, op, false);
    on::require(op, {{x, "x"}, {w, "w"}, {y, "y"}});
    (void)dev;
    if (!direct_forward(g, alg_))
      throw ConfigError(
          detail::concat(op, ": not a geometry of the own kernels here (", on::describe(g), ")"));
    if (winograd_bn(g)) {
      direct_wino_.fwd.set_weights(w, w_version_, g.ic, g.oc);  // once per weights version
      const on::direct::ImageConv c = direct_wino_.fwd.image_conv(int(g.ih), int(g.iw));
      on::direct::forward_images(g, x, w, y, direct_scratch_, stats, in, &c);
      ++winograd_bn_calls_;
    } else {
      on::direct::forward_images(g, x, w, y, direct_scratch_, stats, in);
    }
    ++direct_forwards_;
  }
  /// How many forward_stats calls ran (tests).
  CIFARNET_OUTLINE std::size_t direct_forwards() const { return direct_forwards_; }
  /// How many forward_stats and backward_images_bn calls with dx ran the
  /// own Winograd kernels (winograd_bn; tests).
  CIFARNET_OUTLINE std::size_t winograd_bn_calls() const { return winograd_bn_calls_; }

  /// Whether a bf16 weight gradient (no bias, NHWC, stride 1 or 2, input
  /// channels a multiple of 8, output channels of 16) runs in one of the
  /// project's own kernels: AMX (amx_wgrad.hpp) where the CPU has AMX,
  /// else AVX512-BF16 (bf16_wgrad.hpp) where it has that (default true;
  /// see the file comment). Takes effect for geometries not seen yet.
  CIFARNET_OUTLINE void set_own_weights(bool on) { own_weights_ = on; }
  /// Whether geometry `g`'s weight gradient runs in one of those kernels.
  CIFARNET_OUTLINE bool uses_own_weights(const ConvGeom& g) const {
    const State* s = cache_.find(key(g));
    return s && (s->amx_dw != nullptr || s->dot_dw != nullptr);
  }
  /// Whether it runs in the AMX one.
  CIFARNET_OUTLINE bool uses_amx_weights(const ConvGeom& g) const {
    const State* s = cache_.find(key(g));
    return s && s->amx_dw != nullptr;
  }

  /// forward() takes `relu` (a fused ReLU post-op).
  static constexpr bool fuses_relu = true;

  /// y = conv(x, w) + b (b may be nullptr); with `relu`, y = max(that, 0)
  /// computed in the same pass (a oneDNN post-op).
  CIFARNET_OUTLINE void forward(Dev& dev, const ConvGeom& g, const float* x, const float* w, const float* b,
                                float* y, bool relu = false) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d forward";
    on::check_geometry(g, op, false);
    on::require(op, {{x, "x"}, {w, "w"}, {y, "y"}});
    on::guarded(op, [&] {
      State& s = state(dev, g);
      s.kept_map_x = nullptr;
      // A caller's bf16 copy of x in bf16 (set_bf16_input) goes to the bf16
      // kernel, never the float Winograd: the float x may not be written
      // (a producer that writes only that copy, kBf16InputOnly).
      if (!(s.bf16 && bf16_in_) && s.own_winograd(dev.engine, g)) {
        bf16_in_ = nullptr;  // float convolutions: no bf16 copy is read
        s.kept_x = nullptr;  // nor kept (a bf16 backward_weights rounds x itself)
        float* work = static_cast<float*>(dev.scratch(0, on::winograd::Layer::work_bytes(g)));
        if (s.own_wino->forward(g, x, w, w_version_, b, relu, y, work)) ++weight_reorders_;
        ++own_wino_calls_;
        return;
      }
      Fwd& f = s.forward(cache_, dev.engine, b != nullptr, relu);
      dnnl::memory wm = weights_in(dev, s.w, w, f.w);
      const bool keep = keep_input_ && s.bf16_dw;  // only a bf16 backward_weights reads the copy
      const std::uint16_t* bits = std::exchange(bf16_in_, nullptr);
      dnnl::memory src = f.lp ? lp_src(s, dev, x, bits, keep) : stage_in(dev, f.src, on::bind(s.x, x), 0);
      if (!f.lp || !keep) s.kept_x = nullptr;
      dnnl::memory dst = f.dst.direct() ? on::bind(s.y, y) : on::scratch(dev, f.dst.mem, 1);
      std::unordered_map<int, dnnl::memory> args{
          {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, dst}};
      if (b) args.emplace(DNNL_ARG_BIAS, on::bind(s.b, b));
      f.prim.execute(dev.stream, args);
      if (!f.dst.direct()) f.dst.reorder.execute(dev.stream, dst, on::bind(s.y, y));
      dev.stream.wait();
    });
  }

  /// Whether forward_bf16_dst() can run for `g`: bf16 convolutions and a
  /// oneDNN jit kernel with bf16 input, weights and output (built once).
  CIFARNET_OUTLINE bool has_bf16_dst(Dev& dev, const ConvGeom& g) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d forward (bf16 y)";
    on::check_geometry(g, op, false);
    bool ok = false;
    on::guarded(op, [&] { ok = state(dev, g).forward_lp_dst(cache_, dev.engine) != nullptr; });
    return ok;
  }
  /// Whether a weight gradient of `g` reads x in bf16 (the copy a training
  /// forward keeps), so that forward_bf16_dst given a caller's bf16 copy of
  /// x and the backward after it never read the float x.
  CIFARNET_OUTLINE bool bf16_weights_gradient(Dev& dev, const ConvGeom& g) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d bf16_weights_gradient";
    on::check_geometry(g, op, false);
    bool ok = false;
    on::guarded(op, [&] { ok = state(dev, g).bf16_dw; });
    return ok;
  }
  /// forward() without bias or ReLU writing y as bfloat16 bits: the kernel
  /// rounds its float sums once, as a float y rounded to bf16 would be (the
  /// input of a batch norm that reads bf16, ConvBatchNorm). Needs
  /// has_bf16_dst(g); x is kept for backward_weights as in forward().
  CIFARNET_OUTLINE void forward_bf16_dst(Dev& dev, const ConvGeom& g, const float* x, const float* w,
                                         std::uint16_t* y) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d forward (bf16 y)";
    on::check_geometry(g, op, false);
    on::require(op, {{x, "x"}, {w, "w"}, {y, "y"}});
    on::guarded(op, [&] {
      State& s = state(dev, g);
      s.kept_map_x = nullptr;
      Fwd* f = s.forward_lp_dst(cache_, dev.engine);
      if (!f)
        throw ConfigError(detail::concat(op, ": no bf16 kernel with a bf16 output for ", on::describe(g)));
      dnnl::memory wm = weights_in(dev, s.w, w, f->w);
      const bool keep = keep_input_ && s.bf16_dw;
      dnnl::memory src = lp_src(s, dev, x, std::exchange(bf16_in_, nullptr), keep);
      if (!keep) s.kept_x = nullptr;
      s.y_lp.set_data_handle(y);
      f->prim.execute(dev.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, s.y_lp}});
      dev.stream.wait();
    });
  }

  /// Why forward_bf16_mapped() cannot run for `g`, in words; empty when
  /// it can: bf16 convolutions, NHWC, 3x3, stride 1, padding 1 on every
  /// side, a geometry the own AMX forward kernel takes (amx_conv.hpp), and
  /// a weight gradient in the own AMX kernel, which applies the map too.
  CIFARNET_OUTLINE std::string mapped_why_not(Dev& dev, const ConvGeom& g) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d mapped_why_not";
    on::check_geometry(g, op, false);
    if (prec_ != ConvPrecision::BF16) return "fp32 convolutions";
    if (g.fmt != DataFormat::NHWC) return "NCHW";
    if (g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.pt != 1 || g.pl != 1 || g.pb != 1 || g.pr != 1)
      return "not a 3x3, stride-1 convolution with padding 1";
    std::string why = backend::onednn::amx::Forward3x3::why_not(g.n, g.ih, g.iw, g.ic, g.oc);
    if (!why.empty()) return "the own AMX forward kernel: " + why;
    on::guarded(op, [&] {
      State& s = state(dev, g);
      if (!s.bf16_dw || !s.own_weights(g, own_weights_) || !s.amx_dw)
        why = "its weight gradient does not run in the own AMX kernel";
    });
    return why;
  }
  /// forward_bf16_dst() with x given as a batch norm's input `y_prev`
  /// (bf16 bits) and its map (backend::onednn::amx::InputMap), in the own AMX kernel
  /// (mapped_why_not(g) must be empty): x itself is never written; `x`
  /// only names it (compared by pointer, as forward() keeps x for the
  /// backward). With `stats` (2 * oc doubles), y's per-channel sums and sums
  /// of squares. A training forward (set_keep_input) keeps the input and a
  /// copy of the map for the weight gradient of backward_bf16_dy(), which
  /// applies it to y_prev again; y_prev must not change before then.
  CIFARNET_OUTLINE void forward_bf16_mapped(Dev& dev, const ConvGeom& g, const float* x,
                                            const std::uint16_t* y_prev,
                                            const backend::onednn::amx::InputMap& map, const float* w,
                                            std::uint16_t* y, double* stats) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d forward (mapped input, bf16 y)";
    on::check_geometry(g, op, false);
    on::require(op, {{w, "w"}, {y, "y"}});
    if (!y_prev || !map.scale || !map.shift)
      throw ConfigError(detail::concat(op, ": no input bits or map for ", on::describe(g)));
    on::guarded(op, [&] {
      State& s = state(dev, g);
      bf16_in_ = nullptr;
      if (!s.amx_fwd) {  // the geometry checked once, when its kernel is built
        const std::string why = mapped_why_not(dev, g);
        if (!why.empty()) throw ConfigError(detail::concat(op, ": ", why, " (", on::describe(g), ")"));
        s.amx_fwd = std::make_unique<backend::onednn::amx::Forward3x3>(g.n, g.ih, g.iw, g.ic, g.oc);
      }
      if (w_version_ == 0 || s.amx_fwd_w != w || s.amx_fwd_version != w_version_) {
        s.amx_fwd->set_weights(w);
        s.amx_fwd_w = w;
        s.amx_fwd_version = w_version_;
        ++weight_reorders_;
      }
      s.amx_fwd->run(y_prev, &map, y, stats);
      s.kept_x = nullptr;
      s.kept_map_x = keep_input_ ? x : nullptr;
      if (keep_input_) {
        s.kept_map_bits = y_prev;
        s.kept_map_ab.assign(map.scale, map.scale + g.ic);
        s.kept_map_ab.insert(s.kept_map_ab.end(), map.shift, map.shift + g.ic);
        s.kept_map_relu = map.relu;
      }
    });
  }

  /// Whether forward_gelu_bf16_dst() can run for `g` (with a bias or
  /// not): bf16 convolutions and a oneDNN jit kernel with bf16 input,
  /// weights and output and the GELU post-op (built once).
  CIFARNET_OUTLINE bool has_gelu_bf16_dst(Dev& dev, const ConvGeom& g, bool with_bias) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d forward (GELU, bf16 y)";
    on::check_geometry(g, op, false);
    bool ok = false;
    on::guarded(op, [&] { ok = state(dev, g).forward_gelu_dst(cache_, dev.engine, with_bias) != nullptr; });
    return ok;
  }
  /// y = gelu(conv(x, w) + b) (b optional; the exact erf GELU) written as
  /// bfloat16 bits, in one oneDNN call: the bias and the GELU are the
  /// kernel's post-ops on its float sums, rounded once at the end. For a
  /// convolution whose backward never runs (nothing before or in it needs
  /// a gradient: airbench94's whitening after its bias epochs) followed by
  /// a GELU layer whose output only a bf16 convolution reads
  /// (conv_gelu_bf16_output); x is rounded to bf16 as forward() rounds it,
  /// and not kept. Needs has_gelu_bf16_dst(g, b != nullptr).
  CIFARNET_OUTLINE void forward_gelu_bf16_dst(Dev& dev, const ConvGeom& g, const float* x, const float* w,
                                              const float* b, std::uint16_t* y) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d forward (GELU, bf16 y)";
    on::check_geometry(g, op, false);
    on::require(op, {{x, "x"}, {w, "w"}, {y, "y"}});
    on::guarded(op, [&] {
      State& s = state(dev, g);
      s.kept_map_x = nullptr;
      Fwd* f = s.forward_gelu_dst(cache_, dev.engine, b != nullptr);
      if (!f)
        throw ConfigError(detail::concat(op, ": no bf16 kernel with a GELU post-op and a bf16 output for ",
                                         on::describe(g)));
      dnnl::memory wm = weights_in(dev, s.w, w, f->w);
      dnnl::memory src = lp_src(s, dev, x, std::exchange(bf16_in_, nullptr), false);
      s.kept_x = nullptr;
      s.y_lp.set_data_handle(y);
      std::unordered_map<int, dnnl::memory> args{
          {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, s.y_lp}};
      if (b) args.emplace(DNNL_ARG_BIAS, on::bind(s.b, b));
      f->prim.execute(dev.stream, args);
      dev.stream.wait();
    });
  }

  /// dx = conv_transpose(dy, w), overwritten.
  CIFARNET_OUTLINE void backward_data(Dev& dev, const ConvGeom& g, const float* dy, const float* w,
                                      float* dx) {
    backend::onednn::require("Conv2d backward_data", {{dy, "dy"}, {w, "w"}, {dx, "dx"}});
    backward(dev, g, nullptr, dy, w, dx, nullptr, nullptr);
  }

  /// dw (HWIO) and db (if not nullptr) from x and dy, overwritten.
  CIFARNET_OUTLINE void backward_weights(Dev& dev, const ConvGeom& g, const float* x, const float* dy,
                                         float* dw, float* db) {
    backend::onednn::require("Conv2d backward_weights", {{x, "x"}, {dy, "dy"}, {dw, "dw"}});
    backward(dev, g, x, dy, nullptr, nullptr, dw, db);
  }

  /// db[c] = the sum of dy over the images and pixels, overwritten: the
  /// bias gradient alone, for a convolution whose weights take no gradient
  /// (frozen filters with a trained bias, as airbench94's whitening: oneDNN
  /// has the bias's gradient only inside backward_weights, which would
  /// differentiate the filters for nothing). The rows (NHWC pixels, NCHW
  /// planes) are cut into a fixed number of chunks of whole images, each
  /// summed in blocks of 16 rows added in double, the chunks added in order:
  /// the same bits for any thread count.
  CIFARNET_OUTLINE void bias_gradient(Dev& dev, const ConvGeom& g, const float* dy, float* db) {
    (void)dev;
    backend::onednn::require("Conv2d bias_gradient", {{dy, "dy"}, {db, "db"}});
    constexpr std::size_t kChunks = 16, kBlock = 16;
    const std::size_t C = g.oc, hw = g.oh * g.ow, chunks = std::min(kChunks, std::max<std::size_t>(g.n, 1));
    std::vector<double> part(chunks * C, 0.0);
#pragma omp parallel
    {
      std::vector<float> acc(C);
#pragma omp for schedule(static)
      for (std::ptrdiff_t k = 0; k < std::ptrdiff_t(chunks); ++k) {
        double* s = part.data() + std::size_t(k) * C;
        const std::size_t i0 = g.n * std::size_t(k) / chunks, i1 = g.n * std::size_t(k + 1) / chunks;
        if (g.fmt == DataFormat::NHWC) {
          for (std::size_t r = i0 * hw; r < i1 * hw; r += kBlock) {
            const std::size_t re = std::min(i1 * hw, r + kBlock);
            std::fill(acc.begin(), acc.end(), 0.f);
            for (std::size_t q = r; q < re; ++q) {
              const float* row = dy + q * C;
              float* a = acc.data();
#pragma omp simd
              for (std::size_t c = 0; c < C; ++c) a[c] += row[c];
            }
            for (std::size_t c = 0; c < C; ++c) s[c] += double(acc[c]);
          }
        } else {
          for (std::size_t i = i0; i < i1; ++i)
            for (std::size_t c = 0; c < C; ++c) {
              const float* plane = dy + (i * C + c) * hw;
              for (std::size_t p = 0; p < hw; p += kBlock) {
                const std::size_t pe = std::min(hw, p + kBlock);
                float b = 0.f;
                for (std::size_t q = p; q < pe; ++q) b += plane[q];
                s[c] += double(b);
              }
            }
        }
      }
    }
    for (std::size_t c = 0; c < C; ++c) {
      double t = 0.0;
      for (std::size_t k = 0; k < chunks; ++k) t += part[k * C + c];
      db[c] = float(t);
    }
  }

  /// Both backward passes from one dy: dw (HWIO) and db (if not nullptr)
  /// from x and dy when dw is given, then dx = conv_transpose(dy, w) when dx
  /// is given; all overwritten. In bf16, dy is rounded once for both.
  CIFARNET_OUTLINE void backward(Dev& dev, const ConvGeom& g, const float* x, const float* dy, const float* w,
                                 float* dx, float* dw, float* db) {
    backend::onednn::require(dw ? "Conv2d backward_weights" : "Conv2d backward_data", {{dy, "dy"}});
    run_backward(dev, g, x, dy, w, dx, dw, db);
  }

  /// Where backward_bf16_dy() reads dy from, or nullptr when the backward
  /// of `g` (the weight gradient without bias when `weights`, the data
  /// gradient when `data`) does not read dy in bf16 only. The caller writes
  /// dy there as bfloat16 bits (host::store_bf16: the rounding of the
  /// reorder this replaces) and then calls backward_bf16_dy: the buffer is
  /// device scratch, so no other op of this device may run in between.
  CIFARNET_OUTLINE std::uint16_t* bf16_dy(Dev& dev, const ConvGeom& g, bool weights, bool data) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d bf16_dy";
    on::check_geometry(g, op, false);
    std::uint16_t* out = nullptr;
    on::guarded(op, [&] {
      State& s = state(dev, g);
      BwdWeights* fw = weights ? &s.backward_weights(cache_, dev.engine, false) : nullptr;
      BwdData* fd = data ? &s.backward_data(cache_, dev.engine, g, bwd_via_fwd_) : nullptr;
      if ((fw || fd) && (!fw || fw->lp) && (!fd || fd->lp))
        out = static_cast<std::uint16_t*>(on::scratch(dev, s.dy_lp, 3).get_data_handle());
    });
    return out;
  }
  /// backward() (no bias) with dy the bf16 values written into bf16_dy()'s
  /// buffer, for the same passes bf16_dy was asked about.
  CIFARNET_OUTLINE void backward_bf16_dy(Dev& dev, const ConvGeom& g, const float* x, const float* w,
                                         float* dx, float* dw) {
    run_backward(dev, g, x, nullptr, w, dx, dw, nullptr);
  }
  /// Whether backward_bf16_dy can write dx as bfloat16 bits for `g`: the
  /// data gradient runs in bf16 (as oneDNN's forward kernel above, as the
  /// stride-2 phases, or as its backward_data kernel), and a kernel of the
  /// same pass with a bf16 output exists and takes the same weights'
  /// layout. The bits are the float dx rounded once, in the kernel (the
  /// input gradient of a batch norm that reads dy as bf16, or a residual
  /// block's gradient sum that reads bf16 parts: bf16_branch_gradient).
  CIFARNET_OUTLINE bool writes_bf16_dx(Dev& dev, const ConvGeom& g) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d writes_bf16_dx";
    on::check_geometry(g, op, false);
    bool ok = false;
    on::guarded(op, [&] {
      State& s = state(dev, g);
      BwdData& fd = s.backward_data(cache_, dev.engine, g, bwd_via_fwd_);
      ok = fd.lp && s.lp_dx(cache_, dev.engine, g);
    });
    return ok;
  }
  /// backward_bf16_dy with dx written as bfloat16 bits (writes_bf16_dx(g)
  /// must hold).
  CIFARNET_OUTLINE void backward_bf16_dy(Dev& dev, const ConvGeom& g, const float* x, const float* w,
                                         std::uint16_t* dx, float* dw) {
    backend::onednn::require("Conv2d backward_data (bf16 dx)", {{dx, "dx"}});
    run_backward(dev, g, x, nullptr, w, nullptr, dw, nullptr, dx);
  }

  /// Geometries whose primitives are cached now.
  CIFARNET_OUTLINE std::size_t cached_geometries() const { return cache_.size(); }
  /// Primitives (including reorders) built so far; constant once every
  /// geometry and pass has been seen.
  CIFARNET_OUTLINE std::size_t primitive_builds() const { return cache_.builds(); }

 private:
  // backward(); dy == nullptr: dy is in the bf16 scratch buffer already (bf16_dy).
  // dx_bits: dx as bfloat16 instead (dx null; writes_bf16_dx).
  CIFARNET_OUTLINE void run_backward(Dev& dev, const ConvGeom& g, const float* x, const float* dy,
                                     const float* w, float* dx, float* dw, float* db,
                                     std::uint16_t* dx_bits = nullptr) {
    namespace on = backend::onednn;
    const char* op = dw ? "Conv2d backward_weights" : "Conv2d backward_data";
    on::check_geometry(g, op, false);
    if (dw) on::require(op, {{x, "x"}});
    if (dx || dx_bits) on::require("Conv2d backward_data", {{w, "w"}});
    on::guarded(op, [&] {
      State& s = state(dev, g);
      const bool own_dx = dx && dy && s.own_winograd(dev.engine, g);
      BwdWeights* fw = dw ? &s.backward_weights(cache_, dev.engine, db != nullptr) : nullptr;
      BwdData* fd =
          (dx || dx_bits) && !own_dx ? &s.backward_data(cache_, dev.engine, g, bwd_via_fwd_) : nullptr;
      if (dx_bits && (!fd->lp || !s.lp_dx(cache_, dev.engine, g)))
        throw ConfigError(detail::concat("Conv2d backward_data: no bf16 dx for this geometry (ask ",
                                         "writes_bf16_dx first): ", on::describe(g)));
      if (!dy && ((fw && !fw->lp) || (fd && !fd->lp)))
        throw ConfigError(detail::concat(op,
                                         ": dy handed over in bf16, but a pass of this geometry runs in "
                                         "float (ask bf16_dy first): ",
                                         on::describe(g)));
      std::optional<dnnl::memory> dy_lp;
      if (!dy)
        dy_lp = on::scratch(dev, s.dy_lp, 3);
      else if ((fw && fw->lp) || (fd && fd->lp))
        dy_lp = s.lower_dy(cache_, dev, dy);
      // The mapped input of forward_bf16_mapped: x was never written.
      const bool mapped = fw && s.kept_map_x != nullptr && s.kept_map_x == x;
      if (mapped && (!fw->lp || db || !s.own_weights(g, own_weights_) || !s.amx_dw))
        throw std::logic_error(detail::concat(op, ": a mapped input without the own AMX weight gradient (",
                                              on::describe(g), ")"));
      if (mapped) {
        const backend::onednn::amx::InputMap m{s.kept_map_ab.data(), s.kept_map_ab.data() + g.ic,
                                               s.kept_map_relu};
        s.amx_dw->run(s.kept_map_bits, &m, static_cast<const std::uint16_t*>(dy_lp->get_data_handle()), dw);
      } else if (fw) {
        dnnl::memory& user_dw = on::bind(s.w, dw);
        dnnl::memory src =
            fw->lp ? (s.kept_x == x ? (s.kept_ext ? s.x_ext : s.x_keep) : s.lower_x(cache_, dev, x, false))
                   : on::bind(s.x, x);
        if (fw->lp && !db && s.own_weights(g, own_weights_)) {
          const auto* xb = static_cast<const std::uint16_t*>(src.get_data_handle());
          const auto* dyb = static_cast<const std::uint16_t*>(dy_lp->get_data_handle());
          if (s.amx_dw)
            s.amx_dw->run(xb, dyb, dw);
          else
            s.dot_dw->run(xb, dyb, dw);
        } else if (fw->lp && !db &&
                   s.gemm_weights(cache_, dev.engine, g, chunk_bytes_, gemm_max_pixels_, gemm_min_oc_)) {
          s.gemm_backward_weights(dev, g, src, *dy_lp, dw);
        } else {
          std::unordered_map<int, dnnl::memory> args{
              {DNNL_ARG_SRC, src},
              {DNNL_ARG_DIFF_DST, fw->lp ? *dy_lp : on::bind(s.y, dy)},
              {DNNL_ARG_DIFF_WEIGHTS, fw->dw.direct() ? user_dw : fw->dw.mem}};
          if (db) args.emplace(DNNL_ARG_DIFF_BIAS, on::bind(s.b, db));
          fw->prim.execute(dev.stream, args);
          if (!fw->dw.direct()) fw->dw.reorder.execute(dev.stream, fw->dw.mem, user_dw);
        }
      }
      if (own_dx) {
        dev.stream.wait();  // the weight gradient above may still read dy
        float* work = static_cast<float*>(dev.scratch(0, on::winograd::Layer::work_bytes(g)));
        if (s.own_wino->backward_data(g, dy, w, w_version_, dx, work)) ++weight_reorders_;
        ++own_wino_calls_;
      }
      if (fd && fd->as_fwd) {
        FwdAsBwd& a = *fd->as_fwd;
        if (s.w_flip.update(g, w, w_version_)) a.w.shown = nullptr;  // its copy of w_flip is stale
        dnnl::memory wm = weights_in(dev, s.w_flip_user, s.w_flip.w.data(), a.w);
        if (dx_bits) {
          s.dx_ext.set_data_handle(dx_bits);
          a.prim_lp_dst->execute(dev.stream,
                                 {{DNNL_ARG_SRC, *dy_lp}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, s.dx_ext}});
        } else {
          a.prim.execute(dev.stream,
                         {{DNNL_ARG_SRC, *dy_lp}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, on::bind(s.x, dx)}});
        }
      } else if (fd && fd->as_phases) {
        PhaseBwd& ph = *fd->as_phases;
        if (s.phase_weights(g, w, w_version_)) ph.w[0].shown = ph.w[1].shown = nullptr;
        const dnnl::memory wm[2] = {weights_in(dev, s.w_ph_user[0], s.w_ph[0].data(), ph.w[0]),
                                    weights_in(dev, s.w_ph_user[1], s.w_ph[1].data(), ph.w[1])};
        // Each phase of a chunk: chunk * oh rows of dx, iw * ic values each
        // (float, or bf16 for dx_bits).
        const std::size_t row = g.iw * g.ic, per = ph.chunk * g.oh * row;
        const std::size_t esize = dx_bits ? sizeof(std::uint16_t) : sizeof(float);
        auto* out = static_cast<char*>(dev.scratch(1, 2 * per * esize));
        dnnl::memory* dst = dx_bits ? ph.dst_lp : ph.dst;
        dst[0].set_data_handle(out);
        dst[1].set_data_handle(out + per * esize);
        const auto* dyb = static_cast<std::uint16_t*>(dy_lp->get_data_handle());
        char* dxb = dx_bits ? reinterpret_cast<char*>(dx_bits) : reinterpret_cast<char*>(dx);
        for (std::size_t n0 = 0; n0 < g.n; n0 += ph.chunk) {
          ph.src.set_data_handle(const_cast<std::uint16_t*>(dyb + n0 * g.oh * g.ow * g.oc));
          for (int p = 0; p < 2; ++p)
            (dx_bits ? *ph.prim_lp_dst[p] : ph.prim[p])
                .execute(dev.stream,
                         {{DNNL_ARG_SRC, ph.src}, {DNNL_ARG_WEIGHTS, wm[p]}, {DNNL_ARG_DST, dst[p]}});
          dev.stream.wait();
          char* dxc = dxb + n0 * g.ih * row * esize;
          const auto rows = std::ptrdiff_t(ph.chunk * g.oh);
#pragma omp parallel for schedule(static)
          for (std::ptrdiff_t r = 0; r < rows; ++r)
            for (std::size_t p = 0; p < 2; ++p)
              std::memcpy(dxc + (2 * std::size_t(r) + p) * row * esize,
                          out + (p * per + std::size_t(r) * row) * esize, row * esize);
        }
      } else if (fd && dx_bits) {  // lp, with its bf16-dx kernel (lp_dx)
        dnnl::memory wm = weights_in(dev, s.w, w, fd->w);
        s.dx_ext.set_data_handle(dx_bits);
        fd->prim_lp_dsrc->execute(
            dev.stream, {{DNNL_ARG_DIFF_DST, *dy_lp}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, s.dx_ext}});
      } else if (fd) {
        dnnl::memory wm = weights_in(dev, s.w, w, fd->w);
        dnnl::memory ddst = fd->lp ? *dy_lp : stage_in(dev, fd->ddst, on::bind(s.y, dy), 0);
        dnnl::memory dsrc = fd->dsrc.direct() ? on::bind(s.x, dx) : on::scratch(dev, fd->dsrc.mem, 1);
        fd->prim.execute(dev.stream,
                         {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, dsrc}});
        if (!fd->dsrc.direct()) fd->dsrc.reorder.execute(dev.stream, dsrc, on::bind(s.x, dx));
      }
      dev.stream.wait();
    });
  }

  struct State;
  // The bf16 x of a forward pass: the caller's copy `bits` (set_bf16_input;
  // kept by pointer when `keep`) or x rounded by a reorder (lower_x).
  CIFARNET_OUTLINE dnnl::memory lp_src(State& s, Dev& dev, const float* x, const std::uint16_t* bits,
                                       bool keep) {
    if (!bits) return s.lower_x(cache_, dev, x, keep);
    s.x_ext.set_data_handle(const_cast<std::uint16_t*>(bits));
    s.kept_x = keep ? x : nullptr;
    s.kept_ext = true;
    ++bf16_inputs_;
    return s.x_ext;
  }
  using Key = decltype(std::tuple_cat(ConvGeom{}.key(), std::make_tuple(0, 0)));
  using Cache = backend::onednn::PrimitiveCache<Key, State>;

  CIFARNET_OUTLINE Key key(const ConvGeom& g) const {
    return std::tuple_cat(g.key(), std::make_tuple(int(alg_), int(prec_)));
  }

  // Each pass records whether it runs in bf16 (`lp`: it reads bf16 copies).
  struct Fwd {
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward prim;
    backend::onednn::Staged w, src, dst;  // src/dst staged only for Winograd's blocked layouts
    bool lp;
  };
  // backward_data as a forward convolution of dy (bf16) with the flipped,
  // transposed weights (w_flip, HWIO with I = oc, O = ic), writing float dx.
  struct FwdAsBwd {
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward prim;
    backend::onednn::Staged w;  // w_flip into the primitive's bf16 layout
    // The same convolution writing bf16 dx (writes_bf16_dx), built on first
    // request where oneDNN has it with the same weights' layout.
    std::optional<dnnl::convolution_forward> prim_lp_dst;
    bool lp_dst_tried = false;
  };
  // backward_data of a stride-2 3x3 geometry as two forward convolutions of
  // dy, one per row phase of dx (see State::phases_backward), over chunks of
  // images, each writing into device scratch slot 1, then copied into dx.
  struct PhaseBwd {
    dnnl::convolution_forward prim[2];
    backend::onednn::Staged w[2];  // w_ph into the primitives' bf16 layouts
    dnnl::memory src, dst[2];      // a chunk of dy; the two phases' outputs
    std::size_t chunk = 0;         // images per chunk (divides the batch)
    // The same two convolutions writing bf16 (writes_bf16_dx), built on
    // first request where oneDNN has them with the same weights' layouts.
    std::optional<dnnl::convolution_forward> prim_lp_dst[2];
    dnnl::memory dst_lp[2];
    bool lp_dst_tried = false;
  };
  struct BwdData {
    dnnl::convolution_backward_data::primitive_desc pd;
    dnnl::convolution_backward_data prim;
    backend::onednn::Staged w, ddst, dsrc;
    bool lp;
    std::optional<FwdAsBwd> as_fwd;     // runs instead of prim when present (lp only)
    std::optional<PhaseBwd> as_phases;  // likewise (stride-2 geometries)
    // prim writing bf16 dx (lp, neither of the above; writes_bf16_dx),
    // built on first request where oneDNN has a jit kernel for it with
    // prim's weights' layout.
    std::optional<dnnl::convolution_backward_data> prim_lp_dsrc;
    bool lp_dsrc_tried = false;
  };
  struct BwdWeights {
    dnnl::convolution_backward_weights::primitive_desc pd;
    dnnl::convolution_backward_weights prim;
    backend::onednn::Staged dw;
    bool lp;
  };

  // Whether a bf16 descriptor got a real kernel (not oneDNN's reference one,
  // which is far slower than the float jit kernel it would replace).
  template <class Pd>
  static bool jit_kernel(const Pd& pd) {
    return std::string(pd.impl_info_str()).rfind("ref", 0) != 0;
  }

  // Everything built for one geometry. The user memories (x/y for src/dst
  // and their gradients, w for weights and their gradient, b for bias and
  // its gradient) are re-pointed at the caller's buffers on every call.
  struct State {
    dnnl::memory::desc src, dst, src_any, dst_any, w_user, w_any, bias;
    dnnl::memory::desc src_lp, dst_lp, w_any_lp;  // bf16: plain activations, any weights
    backend::onednn::dims strides, pad_l, pad_r;
    dnnl::memory x, y, w, b;
    bool avoid_rtus_1x1;  // see the oneDNN 2.6 workaround above
    bool wino;            // forward / backward_data use Winograd
    // ... in the own kernels (winograd.hpp), where oneDNN has none (own_winograd)
    std::unique_ptr<backend::onednn::winograd::Layer> own_wino;
    bool own_wino_tried = false;
    bool wino_bf16;  // Winograd chosen in bf16, run float (float_winograd_in_bf16)
    bool bf16;       // try bf16 kernels (ConvPrecision::BF16)
    bool bf16_dw;    // ... in backward_weights too (see the header comment)
    std::optional<dnnl::convolution_forward::primitive_desc> direct_hint_pd;
    std::optional<Fwd> fwd[4];      // [with bias + 2 * with ReLU post-op]
    std::optional<Fwd> fwd_lp_dst;  // bf16 output (forward_bf16_dst), when oneDNN has the kernel
    bool fwd_lp_dst_tried = false;
    std::optional<Fwd> fwd_gelu_dst[2];  // bias (if any) and GELU as post-ops, bf16 output: [with bias]
    bool fwd_gelu_dst_tried[2] = {false, false};
    dnnl::memory y_lp;  // its output, re-pointed per call
    std::optional<dnnl::convolution_forward::primitive_desc> hint_pd, hint_pd_lp;
    std::optional<BwdData> bwd_data;
    std::optional<BwdWeights> bwd_weights[2];  // without / with bias
    // bf16 copies: of x kept from a training forward (x_keep, own buffer,
    // holding kept_x's values), or in device scratch (x_lp slot 2, dy_lp slot 3).
    std::optional<dnnl::reorder> lower_src, lower_dst;
    dnnl::memory x_keep, x_lp, dy_lp;
    dnnl::memory x_ext;   // a caller's bf16 copy of x (set_bf16_input), re-pointed per call
    dnnl::memory dx_ext;  // a caller's bf16 dx (backward_bf16_dy with bits), re-pointed per call
    const float* kept_x = nullptr;
    bool kept_ext = false;  // kept_x's bf16 copy is x_ext (the caller's), not x_keep
    // The im2col + matmul weight gradient (see the file comment): the first
    // chunk's product overwrites dw, the others add to it (a sum post-op).
    std::optional<dnnl::matmul> dw_gemm, dw_gemm_sum;
    dnnl::memory mm_col, mm_dy, mm_dw;
    std::size_t dw_chunk = 0;  // images per chunk (divides the batch)
    bool dw_gemm_tried = false;
    // The own AMX or AVX512-BF16 weight gradient (own_weights), decided once.
    std::unique_ptr<backend::onednn::amx::WeightGrad> amx_dw;
    std::unique_ptr<backend::onednn::bf16dot::WeightGrad> dot_dw;
    bool own_dw_tried = false;
    // The own AMX forward of forward_bf16_mapped, its packed weights' source
    // (buffer and Parameters::version), and the mapped input a training
    // forward keeps for the weight gradient: the batch norm's input bits and
    // its map's scale and shift (copied), for the float x `kept_map_x`
    // stands for (never written; compared by pointer, as kept_x).
    std::unique_ptr<backend::onednn::amx::Forward3x3> amx_fwd;
    const float* amx_fwd_w = nullptr;
    std::uint64_t amx_fwd_version = 0;
    const float* kept_map_x = nullptr;
    const std::uint16_t* kept_map_bits = nullptr;
    std::vector<float> kept_map_ab;  // [scale | shift]
    bool kept_map_relu = false;
    // The flipped weights of FwdAsBwd and their memory.
    backend::onednn::FlippedWeights w_flip;
    dnnl::memory w_flip_user;
    // The phase weights of PhaseBwd (float, HWIO) and their memories, and the
    // caller's w (at ph_version) they were made from.
    std::vector<float> w_ph[2];
    dnnl::memory w_ph_user[2];
    const float* ph_of = nullptr;
    std::uint64_t ph_version = 0;

    CIFARNET_OUTLINE State(const ConvGeom& g, bool winograd, bool lowp, bool own_dw, const dnnl::engine& eng)
        : wino(winograd && !lowp),
          wino_bf16(winograd && lowp && float_winograd_in_bf16()),
          bf16(lowp),
          bf16_dw(lowp && g.ic >= 8 &&
                  ((g.sh == 1 && g.sw == 1) || backend::onednn::cpu_has_amx_convolutions() ||
                   (own_dw && dot_weights(g)))) {
      namespace on = backend::onednn;
      src = on::act_desc(g.fmt, g.n, g.ic, g.ih, g.iw);
      dst = on::act_desc(g.fmt, g.n, g.oc, g.oh, g.ow);
      src_any = dnnl::memory::desc(src.dims(), on::dt::f32, on::tag::any);
      dst_any = dnnl::memory::desc(dst.dims(), on::dt::f32, on::tag::any);
      const on::dims wd{on::dim(g.oc), on::dim(g.ic), on::dim(g.kh), on::dim(g.kw)};
      w_user = dnnl::memory::desc(wd, on::dt::f32, on::tag::hwio);
      w_any = dnnl::memory::desc(wd, on::dt::f32, on::tag::any);
      src_lp = on::act_desc(g.fmt, g.n, g.ic, g.ih, g.iw, on::dt::bf16);
      dst_lp = on::act_desc(g.fmt, g.n, g.oc, g.oh, g.ow, on::dt::bf16);
      w_any_lp = dnnl::memory::desc(wd, on::dt::bf16, on::tag::any);
      x_lp = dnnl::memory(src_lp, eng, DNNL_MEMORY_NONE);
      dy_lp = dnnl::memory(dst_lp, eng, DNNL_MEMORY_NONE);
      y_lp = dnnl::memory(dst_lp, eng, DNNL_MEMORY_NONE);
      x_ext = dnnl::memory(src_lp, eng, DNNL_MEMORY_NONE);
      dx_ext = dnnl::memory(src_lp, eng, DNNL_MEMORY_NONE);
      bias = on::vec_desc(g.oc);
      strides = {on::dim(g.sh), on::dim(g.sw)};
      pad_l = {on::dim(g.pt), on::dim(g.pl)};
      pad_r = {on::dim(g.pb), on::dim(g.pr)};
      x = on::user_memory(src, eng);
      y = on::user_memory(dst, eng);
      w = on::user_memory(w_user, eng);
      b = on::user_memory(bias, eng);
      avoid_rtus_1x1 = g.fmt == DataFormat::NHWC && g.kh == 1 && g.kw == 1 &&
                       (g.sh > 1 || g.sw > 1 || g.pt + g.pl + g.pb + g.pr > 0);
    }

    // Direct on the plain layouts, or Winograd on the layouts it chooses.
    // With `relu`, a ReLU post-op (inference only: no backward uses it).
    // With `lp`, direct with bf16 input and weights (float output).
    CIFARNET_OUTLINE dnnl::convolution_forward::primitive_desc forward_pd(const dnnl::engine& eng,
                                                                          bool with_bias, bool winograd,
                                                                          bool relu = false,
                                                                          bool lp = false) const {
      using cf = dnnl::convolution_forward;
      const auto alg = winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;
      const auto& s = lp ? src_lp : winograd ? src_any : src;
      const auto& d = winograd ? dst_any : dst;
      const auto& wa = lp ? w_any_lp : w_any;
      const auto pk = relu ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
      dnnl::primitive_attr attr;
      if (relu) {
        dnnl::post_ops po;
        po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
        attr.set_post_ops(po);
      }
      return with_bias
                 ? cf::primitive_desc(cf::desc(pk, alg, s, wa, bias, d, strides, pad_l, pad_r), attr, eng)
                 : cf::primitive_desc(cf::desc(pk, alg, s, wa, d, strides, pad_l, pad_r), attr, eng);
    }

    // The bf16 forward descriptor when bf16 is asked for and oneDNN has a jit
    // kernel for it (the pass then runs in bf16), else nothing.
    CIFARNET_OUTLINE std::optional<dnnl::convolution_forward::primitive_desc> lp_forward_pd(
        const dnnl::engine& eng, bool with_bias, bool relu) const {
      if (!bf16) return std::nullopt;
      try {
        auto pd = forward_pd(eng, with_bias, false, relu, true);
        if (jit_kernel(pd)) return pd;
      } catch (const dnnl::error&) {  // no bf16 kernel here: float
      }
      return std::nullopt;
    }

    // The direct training forward with bf16 input, weights and output, or
    // nothing when bf16 is not asked for or oneDNN has no jit kernel for it.
    CIFARNET_OUTLINE Fwd* forward_lp_dst(Cache& c, const dnnl::engine& eng) {
      if (!fwd_lp_dst_tried) {
        fwd_lp_dst_tried = true;
        if (bf16) {
          using cf = dnnl::convolution_forward;
          try {
            cf::primitive_desc pd(
                cf::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src_lp,
                         w_any_lp, dst_lp, strides, pad_l, pad_r),
                eng);
            if (jit_kernel(pd))
              fwd_lp_dst = Fwd{
                  pd, c.template build<cf>(pd), c.stage(eng, pd.weights_desc(), w_user, true), {}, {}, true};
          } catch (const dnnl::error&) {  // no such kernel here: the float output
          }
        }
      }
      return fwd_lp_dst ? &*fwd_lp_dst : nullptr;
    }

    // The bf16 forward (bf16 input and weights) with the bias (if any) and
    // an exact GELU as post-ops and a bf16 output, or nothing when bf16 is
    // not asked for or oneDNN has no jit kernel for it.
    CIFARNET_OUTLINE Fwd* forward_gelu_dst(Cache& c, const dnnl::engine& eng, bool with_bias) {
      const int i = with_bias ? 1 : 0;
      if (!fwd_gelu_dst_tried[i]) {
        fwd_gelu_dst_tried[i] = true;
        if (bf16) {
          using cf = dnnl::convolution_forward;
          try {
            dnnl::post_ops po;
            po.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
            dnnl::primitive_attr attr;
            attr.set_post_ops(po);
            const auto pk = dnnl::prop_kind::forward_inference;  // no backward reads what it keeps
            const auto alg = dnnl::algorithm::convolution_direct;
            cf::primitive_desc pd =
                with_bias
                    ? cf::primitive_desc(
                          cf::desc(pk, alg, src_lp, w_any_lp, bias, dst_lp, strides, pad_l, pad_r), attr, eng)
                    : cf::primitive_desc(cf::desc(pk, alg, src_lp, w_any_lp, dst_lp, strides, pad_l, pad_r),
                                         attr, eng);
            if (jit_kernel(pd))
              fwd_gelu_dst[i] = Fwd{
                  pd, c.template build<cf>(pd), c.stage(eng, pd.weights_desc(), w_user, true), {}, {}, true};
          } catch (const dnnl::error&) {  // no such kernel here
          }
        }
      }
      return fwd_gelu_dst[i] ? &*fwd_gelu_dst[i] : nullptr;
    }

    // The bf16 copy of the caller's x: into x_keep (kept for backward_weights
    // of the same x) or into device scratch slot 2.
    CIFARNET_OUTLINE dnnl::memory lower_x(Cache& c, Device<backend::OneDnn>& dev, const float* px,
                                          bool keep) {
      namespace on = backend::onednn;
      if (!lower_src)
        lower_src = c.template build<dnnl::reorder>(
            dnnl::reorder::primitive_desc(dev.engine, src, dev.engine, src_lp));
      dnnl::memory out = x_lp;
      if (keep) {
        if (!x_keep) x_keep = dnnl::memory(src_lp, dev.engine);
        out = x_keep;
      } else {
        on::scratch(dev, x_lp, 2);
      }
      lower_src->execute(dev.stream, on::bind(x, px), out);
      if (keep) {
        kept_x = px;
        kept_ext = false;
      }
      return out;
    }

    // The bf16 copy of the caller's dy, in device scratch slot 3.
    CIFARNET_OUTLINE dnnl::memory lower_dy(Cache& c, Device<backend::OneDnn>& dev, const float* pdy) {
      namespace on = backend::onednn;
      if (!lower_dst)
        lower_dst = c.template build<dnnl::reorder>(
            dnnl::reorder::primitive_desc(dev.engine, dst, dev.engine, dst_lp));
      on::scratch(dev, dy_lp, 3);
      lower_dst->execute(dev.stream, on::bind(y, pdy), dy_lp);
      return dy_lp;
    }

    // Whether forward and backward_data run the own Winograd kernels:
    // Winograd chosen (float, or bf16 where float_winograd_in_bf16), a
    // geometry of the own kernels, and either no oneDNN Winograd kernel for
    // it or a CPU that runs AVX-512 in 256-bit halves (Zen 4), where the
    // own kernels ran VGG-19's convolutions 1.2-1.9x as fast as oneDNN's
    // AVX-512 Winograd, forward and data gradient (docs/BENCHMARKS.md,
    // 2026-12-06 09:45). Decided at the first call, before anything is
    // built with Winograd.
    CIFARNET_OUTLINE bool own_winograd(const dnnl::engine& eng, const ConvGeom& g) {
      if (!own_wino_tried) {
        own_wino_tried = true;
        if ((wino || wino_bf16) && backend::onednn::winograd::supports(g)) {
          bool onednn_has = false;
          if (!wino_bf16 && !backend::onednn::direct::avx512_in_halves()) {
            try {
              (void)forward_pd(eng, false, true);
              onednn_has = true;
            } catch (const dnnl::error&) {  // none: the own kernels
            }
          }
          if (!onednn_has) own_wino = std::make_unique<backend::onednn::winograd::Layer>();
        }
      }
      return own_wino != nullptr;
    }

    // Winograd when chosen and offered; a refusal switches this geometry to
    // direct for good (before anything was built with Winograd).
    CIFARNET_OUTLINE dnnl::convolution_forward::primitive_desc chosen_forward_pd(const dnnl::engine& eng,
                                                                                 bool with_bias,
                                                                                 bool relu = false) {
      if (wino) {
        try {
          return forward_pd(eng, with_bias, true, relu);
        } catch (const dnnl::error&) {
          wino = false;
          hint_pd.reset();
        }
      }
      return forward_pd(eng, with_bias, false, relu);
    }

    // Another forward of a geometry whose algorithm is settled; a Winograd
    // kernel without the ReLU post-op falls back to direct for that variant.
    CIFARNET_OUTLINE dnnl::convolution_forward::primitive_desc settled_forward_pd(const dnnl::engine& eng,
                                                                                  bool with_bias,
                                                                                  bool relu) const {
      if (wino) {
        try {
          return forward_pd(eng, with_bias, true, relu);
        } catch (const dnnl::error&) {
        }
      }
      return forward_pd(eng, with_bias, false, relu);
    }

    // The forward descriptor backward_data takes as its hint (same algorithm).
    CIFARNET_OUTLINE const dnnl::convolution_forward::primitive_desc& hint(const dnnl::engine& eng) {
      for (int i : {0, 1})  // the training forwards (no post-op)
        if (fwd[i] && !fwd[i]->lp) return fwd[i]->pd;
      if (!hint_pd) hint_pd = chosen_forward_pd(eng, false);
      return *hint_pd;
    }

    // The direct forward descriptor backward_weights takes as its hint.
    CIFARNET_OUTLINE const dnnl::convolution_forward::primitive_desc& direct_hint(const dnnl::engine& eng) {
      if (!wino) return hint(eng);
      if (!direct_hint_pd) direct_hint_pd = forward_pd(eng, false, false);
      return *direct_hint_pd;
    }

    // The bf16 forward descriptor the bf16 backward passes take as their
    // hint, or nothing when oneDNN has no bf16 forward kernel here.
    CIFARNET_OUTLINE const dnnl::convolution_forward::primitive_desc* lp_hint(const dnnl::engine& eng) {
      if (!bf16) return nullptr;
      for (int i : {0, 1})
        if (fwd[i] && fwd[i]->lp) return &fwd[i]->pd;
      if (!hint_pd_lp) hint_pd_lp = lp_forward_pd(eng, false, false);
      return hint_pd_lp ? &*hint_pd_lp : nullptr;
    }

    CIFARNET_OUTLINE Fwd& forward(Cache& c, const dnnl::engine& eng, bool with_bias, bool relu) {
      auto& f = fwd[int(with_bias) + 2 * int(relu)];
      if (!f) {
        if (auto lp = lp_forward_pd(eng, with_bias, relu)) {
          f = Fwd{*lp,
                  c.template build<dnnl::convolution_forward>(*lp),
                  c.stage(eng, lp->weights_desc(), w_user, true),
                  {},
                  {},
                  true};
          return *f;
        }
        bool settled = hint_pd.has_value();  // `wino` already final
        for (const auto& o : fwd) settled = settled || (o && !o->lp);
        auto pd =
            settled ? settled_forward_pd(eng, with_bias, relu) : chosen_forward_pd(eng, with_bias, relu);
        f = Fwd{pd,
                c.template build<dnnl::convolution_forward>(pd),
                c.stage(eng, pd.weights_desc(), w_user, true),
                c.stage_scratch(eng, pd.src_desc(), src, true),
                c.stage_scratch(eng, pd.dst_desc(), dst, false),
                false};
      }
      return *f;
    }

    CIFARNET_OUTLINE BwdData& backward_data(Cache& c, const dnnl::engine& eng, const ConvGeom& g,
                                            bool via_fwd) {
      if (!bwd_data) {
        using cb = dnnl::convolution_backward_data;
        if (const auto* lh = lp_hint(eng)) {
          try {
            cb::primitive_desc pd(
                cb::desc(dnnl::algorithm::convolution_direct, src, w_any_lp, dst_lp, strides, pad_l, pad_r),
                eng, *lh);
            if (jit_kernel(pd)) {
              bwd_data = BwdData{pd,
                                 c.template build<cb>(pd),
                                 c.stage(eng, pd.weights_desc(), w_user, true),
                                 {},
                                 {},
                                 true,
                                 {},
                                 {},
                                 {},
                                 false};
              if (via_fwd) bwd_data->as_fwd = forward_as_backward(c, eng, g);
              if (via_fwd && !bwd_data->as_fwd) bwd_data->as_phases = phases_backward(c, eng, g);
              return *bwd_data;
            }
          } catch (const dnnl::error&) {  // no bf16 kernel for this pass: float
          }
        }
        const auto& h = hint(eng);  // settles `wino` first
        std::optional<cb::primitive_desc> pd;
        if (wino) {
          try {
            pd = cb::primitive_desc(cb::desc(dnnl::algorithm::convolution_winograd, src_any, w_any, dst_any,
                                             strides, pad_l, pad_r),
                                    eng, h);
          } catch (const dnnl::error&) {  // no Winograd kernel for this pass: direct
          }
        }
        if (!pd)
          pd = cb::primitive_desc(
              cb::desc(dnnl::algorithm::convolution_direct, src, w_any, dst, strides, pad_l, pad_r), eng,
              direct_hint(eng));
        bwd_data = BwdData{*pd,
                           c.template build<cb>(*pd),
                           c.stage(eng, pd->weights_desc(), w_user, true),
                           c.stage_scratch(eng, pd->diff_dst_desc(), dst, true),
                           c.stage_scratch(eng, pd->diff_src_desc(), src, false),
                           false,
                           {},
                           {},
                           {},
                           false};
      }
      return *bwd_data;
    }

    // backward_data of a stride-1 geometry as a bf16 forward convolution:
    // dx[n, y, x, c] = sum over (i, j, o) of dy[n, y + i - p't, x + j - p'l, o]
    // w'[i, j, o, c] with w'[i, j, o, c] = w[KH-1-i, KW-1-j, c, o] and the
    // padding p' = K - 1 - p of each side (the output is the input's size).
    // Only for odd kernels with the symmetric SAME padding (p = (K - 1) / 2,
    // so p' = p: the geometry of the forward itself, ResNet's and airbench's
    // 3x3): oneDNN 2.6's brgconv read a wild address on a 2x2 kernel whose
    // padding moved to the other side (p' = 1, 0; a SIGSEGV in the ASan
    // build of the tests). Nothing else, nor when oneDNN has no jit kernel.
    CIFARNET_OUTLINE static bool forward_as_backward_geometry(const ConvGeom& g) {
      return g.sh == 1 && g.sw == 1 && g.kh % 2 == 1 && g.kw % 2 == 1 && 2 * g.pt + 1 == g.kh &&
             2 * g.pb + 1 == g.kh && 2 * g.pl + 1 == g.kw && 2 * g.pr + 1 == g.kw;
    }
    // That convolution's descriptor (bf16 dy in, the flipped weights in any
    // bf16 layout) writing dx in `dx_desc` (float src, or bf16 src_lp).
    CIFARNET_OUTLINE dnnl::convolution_forward::primitive_desc forward_as_backward_pd(
        const dnnl::engine& eng, const ConvGeom& g, const dnnl::memory::desc& dx_desc) const {
      namespace on = backend::onednn;
      using cf = dnnl::convolution_forward;
      const on::dims wd{on::dim(g.ic), on::dim(g.oc), on::dim(g.kh), on::dim(g.kw)};
      return cf::primitive_desc(
          cf::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, dst_lp,
                   dnnl::memory::desc(wd, on::dt::bf16, on::tag::any), dx_desc, strides,
                   on::dims{on::dim(g.kh - 1 - g.pt), on::dim(g.kw - 1 - g.pl)},
                   on::dims{on::dim(g.kh - 1 - g.pb), on::dim(g.kw - 1 - g.pr)}),
          eng);
    }
    CIFARNET_OUTLINE std::optional<FwdAsBwd> forward_as_backward(Cache& c, const dnnl::engine& eng,
                                                                 const ConvGeom& g) {
      namespace on = backend::onednn;
      if (!forward_as_backward_geometry(g)) return std::nullopt;
      using cf = dnnl::convolution_forward;
      const on::dims wd{on::dim(g.ic), on::dim(g.oc), on::dim(g.kh), on::dim(g.kw)};
      const dnnl::memory::desc flip_user(wd, on::dt::f32, on::tag::hwio);
      try {
        const cf::primitive_desc pd = forward_as_backward_pd(eng, g, src);
        if (!jit_kernel(pd) || pd.dst_desc() != src) return std::nullopt;
        w_flip.w.assign(g.kh * g.kw * g.ic * g.oc, 0.f);
        w_flip_user = dnnl::memory(flip_user, eng, w_flip.w.data());
        return FwdAsBwd{
            pd, c.template build<cf>(pd), c.stage(eng, pd.weights_desc(), flip_user, true), {}, false};
      } catch (const dnnl::error&) {  // no such kernel here: the backward_data primitive
        return std::nullopt;
      }
    }

    // The forward-as-backward convolution with a bf16 dx, or nullptr (no
    // such pass for this geometry, or no kernel with the float-dx one's
    // weights' layout).
    CIFARNET_OUTLINE dnnl::convolution_forward* as_fwd_lp_dst(Cache& c, const dnnl::engine& eng,
                                                              const ConvGeom& g) {
      if (!bwd_data || !bwd_data->as_fwd) return nullptr;
      FwdAsBwd& a = *bwd_data->as_fwd;
      if (!a.lp_dst_tried) {
        a.lp_dst_tried = true;
        try {
          const auto pd = forward_as_backward_pd(eng, g, src_lp);
          if (jit_kernel(pd) && pd.dst_desc() == src_lp && pd.weights_desc() == a.pd.weights_desc())
            a.prim_lp_dst = c.template build<dnnl::convolution_forward>(pd);
        } catch (const dnnl::error&) {  // no such kernel: float dx only
        }
      }
      return a.prim_lp_dst ? &*a.prim_lp_dst : nullptr;
    }
    // Whether the bf16 backward_data this geometry runs (backward_data()
    // built first, lp) has a variant writing bf16 dx with the same weights'
    // layout(s): the forward-as-backward one (as_fwd_lp_dst), the two phase
    // convolutions, or oneDNN's backward_data kernel itself; each built on
    // first request.
    CIFARNET_OUTLINE bool lp_dx(Cache& c, const dnnl::engine& eng, const ConvGeom& g) {
      namespace on = backend::onednn;
      if (!bwd_data || !bwd_data->lp) return false;
      BwdData& b = *bwd_data;
      if (b.as_fwd) return as_fwd_lp_dst(c, eng, g) != nullptr;
      if (b.as_phases) {
        PhaseBwd& ph = *b.as_phases;
        if (!ph.lp_dst_tried) {
          ph.lp_dst_tried = true;
          using cf = dnnl::convolution_forward;
          const dnnl::memory::desc out = on::act_desc(g.fmt, ph.chunk, 2 * g.ic, g.oh, g.ow, on::dt::bf16);
          try {
            std::optional<cf> prim[2];
            for (int p = 0; p < 2; ++p) {
              const cf::primitive_desc pd = phase_pd(eng, g, ph.chunk, p, out);
              if (!jit_kernel(pd) || pd.dst_desc() != out || ph.w[p].direct() ||
                  pd.weights_desc() != ph.w[p].mem.get_desc())
                return false;
              prim[p] = c.template build<cf>(pd);
            }
            for (int p = 0; p < 2; ++p) {
              ph.prim_lp_dst[p] = std::move(prim[p]);
              ph.dst_lp[p] = dnnl::memory(out, eng, DNNL_MEMORY_NONE);
            }
          } catch (const dnnl::error&) {  // no such kernel: float dx only
          }
        }
        return ph.prim_lp_dst[0].has_value();
      }
      if (!b.lp_dsrc_tried) {
        b.lp_dsrc_tried = true;
        using cb = dnnl::convolution_backward_data;
        try {
          if (const auto* lh = lp_hint(eng)) {
            const cb::primitive_desc pd(cb::desc(dnnl::algorithm::convolution_direct, src_lp, w_any_lp,
                                                 dst_lp, strides, pad_l, pad_r),
                                        eng, *lh);
            if (jit_kernel(pd) && pd.diff_src_desc() == src_lp && pd.weights_desc() == b.pd.weights_desc())
              b.prim_lp_dsrc = c.template build<cb>(pd);
          }
        } catch (const dnnl::error&) {  // no such kernel: float dx only
        }
      }
      return b.prim_lp_dsrc.has_value();
    }

    // backward_data of ResNet's stride-2 3x3 (padding 1 before, even image
    // sizes, output half the input) by the row phase p of dx: dx[2Y + p]
    // [2X + q][c] = sum over (ky, kx, o) of dy[Y + ky][X + kx][o] *
    // w_p[ky][kx][o][q, c], a stride-1 forward convolution of dy with 2 * ic
    // output channels (the two column phases q side by side, as dx's row 2Y
    // + p holds them) and padding 1 after: p = 0 takes kernel row 1 (a 1x2
    // kernel), p = 1 rows 2 and 0 (2x2); column phase 0 takes kernel column
    // 1 (and a zero), phase 1 columns 2 and 0. oneDNN 2.6 writes a dense
    // output only (a strided view of dx got its reference kernel, 1000x
    // slower), so each phase's rows are copied into dx, chunk by chunk while
    // they are in cache (chunks of 32 images were the fastest of 8, 16, 32
    // and 128 in a probe). On a 2-core AMX Xeon, batch 128, 32 -> 64 at
    // 16x16 took 0.53 / 0.53 ms against oneDNN's backward_data's 0.61 / 0.59
    // ms in conv_passes_bench (which rounds a float dy first), and in the
    // ResNet-20 step, where dy comes as bf16, that convolution's whole
    // backward went from 2.54 to 1.39 ms with the weight gradient's change
    // (docs/BENCHMARKS.md, 2026-11-27 17:40). 16 -> 32 at 32x32 did not gain
    // in conv_passes_bench, which rounds a float dy first, and was left to
    // oneDNN's backward_data until 2026-12-05: in the step, dy bf16 and dx
    // written as bf16, that convolution's backward took 1.30-1.34 ms against
    // 1.42-1.54 (docs/BENCHMARKS.md, 2026-12-05 06:36; oneDNN's kernel
    // there ran 1.46x faster on two threads than on one). Only on AMX (brgconv
    // kernels), for batches with a divisor from 8 to 32 (or below 8) for the
    // chunk.
    CIFARNET_OUTLINE static bool phases_geometry(const ConvGeom& g) {
      return g.fmt == DataFormat::NHWC && g.kh == 3 && g.kw == 3 && g.sh == 2 && g.sw == 2 && g.pt == 1 &&
             g.pl == 1 && g.ih % 2 == 0 && g.iw % 2 == 0 && 2 * g.oh == g.ih && 2 * g.ow == g.iw &&
             g.ic >= 16 && backend::onednn::cpu_has_amx_convolutions();
    }
    // Row phase p's convolution of a chunk of `chunk` images of dy (bf16)
    // writing `out` (float, or bf16 for writes_bf16_dx).
    CIFARNET_OUTLINE static dnnl::convolution_forward::primitive_desc phase_pd(
        const dnnl::engine& eng, const ConvGeom& g, std::size_t chunk, int p, const dnnl::memory::desc& out) {
      namespace on = backend::onednn;
      using cf = dnnl::convolution_forward;
      const dnnl::memory::desc dyc = on::act_desc(g.fmt, chunk, g.oc, g.oh, g.ow, on::dt::bf16);
      const on::dims wd{on::dim(2 * g.ic), on::dim(g.oc), on::dim(p + 1), 2};
      return cf::primitive_desc(
          cf::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, dyc,
                   dnnl::memory::desc(wd, on::dt::bf16, on::tag::any), out, on::dims{1, 1}, on::dims{0, 0},
                   on::dims{p, 1}),
          eng);
    }
    CIFARNET_OUTLINE std::optional<PhaseBwd> phases_backward(Cache& c, const dnnl::engine& eng,
                                                             const ConvGeom& g) {
      namespace on = backend::onednn;
      using cf = dnnl::convolution_forward;
      if (!phases_geometry(g)) return std::nullopt;
      std::size_t chunk = std::min<std::size_t>(g.n, 32);
      while (g.n % chunk != 0) --chunk;
      if (chunk < 8 && chunk != g.n) return std::nullopt;
      const dnnl::memory::desc dyc = on::act_desc(g.fmt, chunk, g.oc, g.oh, g.ow, on::dt::bf16);
      const dnnl::memory::desc out = on::act_desc(g.fmt, chunk, 2 * g.ic, g.oh, g.ow);
      PhaseBwd ph;
      try {
        for (int p = 0; p < 2; ++p) {
          const on::dims wd{on::dim(2 * g.ic), on::dim(g.oc), on::dim(p + 1), 2};
          const cf::primitive_desc pd = phase_pd(eng, g, chunk, p, out);
          if (!jit_kernel(pd) || pd.dst_desc() != out) return std::nullopt;
          const dnnl::memory::desc user(wd, on::dt::f32, on::tag::hwio);
          ph.prim[p] = c.template build<cf>(pd);
          ph.w[p] = c.stage(eng, pd.weights_desc(), user, true);
          ph.dst[p] = dnnl::memory(out, eng, DNNL_MEMORY_NONE);
          w_ph[p].assign(std::size_t(p + 1) * 2 * g.oc * 2 * g.ic, 0.f);
          w_ph_user[p] = dnnl::memory(user, eng, w_ph[p].data());
        }
      } catch (const dnnl::error&) {  // no such kernel here: the backward_data primitive
        return std::nullopt;
      }
      ph.src = dnnl::memory(dyc, eng, DNNL_MEMORY_NONE);
      ph.chunk = chunk;
      return ph;
    }
    // w_ph from the caller's HWIO w, unless it holds w at this version. True
    // when it was rewritten (the primitive-layout copies are then stale).
    CIFARNET_OUTLINE bool phase_weights(const ConvGeom& g, const float* w, std::uint64_t version) {
      if (version != 0 && ph_of == w && ph_version == version) return false;
      const std::size_t I = g.ic, O = g.oc;
      for (std::size_t p = 0; p < 2; ++p)
        for (std::size_t ky = 0; ky <= p; ++ky) {
          const std::size_t i = p == 0 ? 1 : ky == 0 ? 2 : 0;
          for (std::size_t kx = 0; kx < 2; ++kx)
            for (std::size_t q = 0; q < 2; ++q) {
              float* dst = w_ph[p].data() + (ky * 2 + kx) * O * 2 * I + q * I;  // [o][q, c]
              if (q == 0 && kx == 1) {  // column phase 0 reads one dy column
                for (std::size_t o = 0; o < O; ++o) std::fill_n(dst + o * 2 * I, I, 0.f);
                continue;
              }
              const std::size_t j = q == 0 ? 1 : kx == 0 ? 2 : 0;
              const float* src_ij = w + (i * 3 + j) * I * O;  // [c][o]
              for (std::size_t c = 0; c < I; ++c)
                for (std::size_t o = 0; o < O; ++o) dst[o * 2 * I + c] = src_ij[c * O + o];
            }
        }
      ph_of = w;
      ph_version = version;
      return true;
    }

    // Whether this geometry's bf16 weight gradient (no bias) runs in an own
    // kernel: asked for, NHWC, stride 1 or 2 (the strides measured), and a
    // geometry the kernel takes (input channels a multiple of 8, output
    // channels of 16); the AMX one on a CPU with AMX, else the AVX512-BF16
    // one where oneDNN runs AVX-512 (dot_weights). Decided once.
    CIFARNET_OUTLINE bool own_weights(const ConvGeom& g, bool wanted) {
      namespace amx = backend::onednn::amx;
      if (!own_dw_tried) {
        own_dw_tried = true;
        if (wanted && g.fmt == DataFormat::NHWC && g.sh <= 2 && g.sw <= 2 && amx::amx_available() &&
            amx::WeightGrad::supported(g.n, g.ih, g.iw, g.ic, g.oc, g.kh, g.kw, g.pt, g.pl, g.pb, g.pr, g.sh,
                                       g.sw))
          amx_dw = std::make_unique<amx::WeightGrad>(g.n, g.ih, g.iw, g.ic, g.oc, g.kh, g.kw, g.pt, g.pl,
                                                     g.pb, g.pr, g.sh, g.sw);
        else if (wanted && dot_weights(g))
          dot_dw = std::make_unique<backend::onednn::bf16dot::WeightGrad>(
              g.n, g.ih, g.iw, g.ic, g.oc, g.kh, g.kw, g.pt, g.pl, g.pb, g.pr, g.sh, g.sw);
      }
      return amx_dw != nullptr || dot_dw != nullptr;
    }
    // Whether the AVX512-BF16 weight gradient takes `g`: NHWC, stride 1 or
    // 2, a CPU where it runs (cpu_has_own_bf16_weights), and a geometry the
    // kernel takes.
    CIFARNET_OUTLINE static bool dot_weights(const ConvGeom& g) {
      namespace on = backend::onednn;
      return g.fmt == DataFormat::NHWC && g.sh <= 2 && g.sw <= 2 && on::cpu_has_own_bf16_weights() &&
             on::bf16dot::WeightGrad::supported(g.n, g.ih, g.iw, g.ic, g.oc, g.kh, g.kw, g.pt, g.pl, g.pb,
                                                g.pr, g.sh, g.sw);
    }

    // Whether this geometry's bf16 weight gradient (no bias) is the im2col +
    // matmul: NHWC, stride 1, at most 7x7 output pixels, 128 or more output
    // channels, a chunk size that divides the batch near 16 MiB of im2col,
    // and an AMX matmul kernel (measured only there). Decided and built once.
    CIFARNET_OUTLINE bool gemm_weights(Cache& c, const dnnl::engine& eng, const ConvGeom& g,
                                       std::size_t chunk_bytes, std::size_t max_pixels, std::size_t min_oc) {
      namespace on = backend::onednn;
      if (dw_gemm_tried) return dw_gemm.has_value();
      dw_gemm_tried = true;
      if (g.fmt != DataFormat::NHWC || g.sh != 1 || g.sw != 1 || g.oh * g.ow > max_pixels || g.oc < min_oc)
        return false;
      const std::size_t P = g.oh * g.ow, L = g.kh * g.kw * g.ic;
      const std::size_t target = std::min(g.n, std::max<std::size_t>(1, chunk_bytes / (P * L * 2)));
      std::size_t nc = target;
      while (g.n % nc != 0) --nc;
      if (nc * 4 < target) return false;  // only small chunks divide the batch: the conv kernel
      const on::dim K = on::dim(nc * P), Lm = on::dim(L), O = on::dim(g.oc);
      const dnnl::memory::desc col({Lm, K}, on::dt::bf16, on::dims{1, Lm});  // im2col, transposed view
      const dnnl::memory::desc dyd({K, O}, on::dt::bf16, on::dims{O, 1});
      const dnnl::memory::desc dwd({Lm, O}, on::dt::f32, on::dims{O, 1});  // HWIO
      try {
        const dnnl::matmul::desc d(col, dyd, dwd);
        dnnl::matmul::primitive_desc first(d, eng);
        if (std::string(first.impl_info_str()).find("amx") == std::string::npos) return false;
        dnnl::post_ops po;
        po.append_sum(1.0f);
        dnnl::primitive_attr attr;
        attr.set_post_ops(po);
        dnnl::matmul::primitive_desc rest(d, attr, eng);
        dw_gemm = c.template build<dnnl::matmul>(first);
        dw_gemm_sum = c.template build<dnnl::matmul>(rest);
      } catch (const dnnl::error&) {  // no such matmul here: the conv kernel
        dw_gemm.reset();
        return false;
      }
      mm_col = dnnl::memory(col, eng, DNNL_MEMORY_NONE);
      mm_dy = dnnl::memory(dyd, eng, DNNL_MEMORY_NONE);
      mm_dw = dnnl::memory(dwd, eng, DNNL_MEMORY_NONE);
      dw_chunk = nc;
      return true;
    }

    // dw (HWIO, overwritten) from the bf16 NHWC copies of x and dy, chunk by
    // chunk: each chunk's im2col rows (output pixel, then (kh, kw, ic)) in
    // device scratch slot 0, then dw (+)= colᵀ · dy of the chunk.
    CIFARNET_OUTLINE void gemm_backward_weights(Device<backend::OneDnn>& dev, const ConvGeom& g,
                                                const dnnl::memory& xs, const dnnl::memory& dys, float* dw) {
      const std::size_t P = g.oh * g.ow, L = g.kh * g.kw * g.ic, ic = g.ic;
      const auto* x = static_cast<const std::uint16_t*>(xs.get_data_handle());
      auto* dy = static_cast<std::uint16_t*>(dys.get_data_handle());
      auto* col = static_cast<std::uint16_t*>(dev.scratch(0, dw_chunk * P * L * sizeof(std::uint16_t)));
      mm_col.set_data_handle(col);
      mm_dw.set_data_handle(dw);
      const auto ih = std::ptrdiff_t(g.ih), iw = std::ptrdiff_t(g.iw);
      for (std::size_t n0 = 0; n0 < g.n; n0 += dw_chunk) {
        const auto rows = std::ptrdiff_t(dw_chunk * P);
#pragma omp parallel for schedule(static)
        for (std::ptrdiff_t r = 0; r < rows; ++r) {
          const std::size_t n = n0 + std::size_t(r) / P, pix = std::size_t(r) % P;
          const auto oy = std::ptrdiff_t(pix / g.ow), ox = std::ptrdiff_t(pix % g.ow);
          std::uint16_t* out = col + std::size_t(r) * L;
          for (std::size_t i = 0; i < g.kh; ++i) {
            const std::ptrdiff_t iy = oy + std::ptrdiff_t(i) - std::ptrdiff_t(g.pt);
            for (std::size_t j = 0; j < g.kw; ++j, out += ic) {
              const std::ptrdiff_t ix = ox + std::ptrdiff_t(j) - std::ptrdiff_t(g.pl);
              if (iy < 0 || ix < 0 || iy >= ih || ix >= iw)
                std::memset(out, 0, ic * sizeof(std::uint16_t));
              else
                std::memcpy(out, x + ((n * g.ih + std::size_t(iy)) * g.iw + std::size_t(ix)) * ic,
                            ic * sizeof(std::uint16_t));
            }
          }
        }
        mm_dy.set_data_handle(dy + n0 * P * g.oc);
        (n0 == 0 ? *dw_gemm : *dw_gemm_sum)
            .execute(dev.stream, {{DNNL_ARG_SRC, mm_col}, {DNNL_ARG_WEIGHTS, mm_dy}, {DNNL_ARG_DST, mm_dw}});
        dev.stream.wait();  // the next chunk overwrites col
      }
    }

    CIFARNET_OUTLINE BwdWeights& backward_weights(Cache& c, const dnnl::engine& eng, bool with_bias) {
      auto& f = bwd_weights[with_bias];
      if (!f) {
        using cw = dnnl::convolution_backward_weights;
        const auto alg = dnnl::algorithm::convolution_direct;
        if (const auto* lh = bf16_dw ? lp_hint(eng) : nullptr) {
          try {  // bf16 x and dy, float dw (and db)
            const cw::desc d = with_bias ? cw::desc(alg, src_lp, w_any, bias, dst_lp, strides, pad_l, pad_r)
                                         : cw::desc(alg, src_lp, w_any, dst_lp, strides, pad_l, pad_r);
            cw::primitive_desc pd(d, eng, *lh);
            if (jit_kernel(pd)) {
              f = BwdWeights{pd, c.template build<cw>(pd),
                             c.stage(eng, pd.diff_weights_desc(), w_user, false), true};
              return *f;
            }
          } catch (const dnnl::error&) {  // no bf16 kernel for this pass: float
          }
        }
        // The op descriptor must outlive next_impl(): oneDNN 2.6's
        // implementation iterator keeps a pointer to it.
        const cw::desc d = with_bias ? cw::desc(alg, src, w_any, bias, dst, strides, pad_l, pad_r)
                                     : cw::desc(alg, src, w_any, dst, strides, pad_l, pad_r);
        cw::primitive_desc pd(d, eng, direct_hint(eng));
        if (avoid_rtus_1x1)
          while (std::string(pd.impl_info_str()).rfind("jit_1x1", 0) == 0 && pd.next_impl()) {
          }
        f = BwdWeights{pd, c.template build<cw>(pd), c.stage(eng, pd.diff_weights_desc(), w_user, false),
                       false};
      }
      return *f;
    }
  };

  CIFARNET_OUTLINE State& state(Dev& dev, const ConvGeom& g) {
    return cache_.get(dev.engine, key(g), [&] {
      return State(g, want_winograd(alg_, g), prec_ == ConvPrecision::BF16, own_weights_, dev.engine);
    });
  }

  // The plain buffer `user`, or its copy in the primitive's layout (in device
  // scratch slot `slot`).
  CIFARNET_OUTLINE static dnnl::memory stage_in(Dev& dev, backend::onednn::Staged& st, dnnl::memory user,
                                                int slot) {
    if (st.direct()) return user;
    dnnl::memory m = backend::onednn::scratch(dev, st.mem, slot);
    st.reorder.execute(dev.stream, user, m);
    return m;
  }

  // The weights as the primitive wants them: the caller's HWIO buffer, or its
  // copy reordered into the primitive's layout. The reordered copy is reused
  // while the caller's buffer and its Parameters::version stay the same
  // (between the passes of a step, frozen weights, repeated inference):
  // reorders into Winograd's transformed layout are expensive.
  CIFARNET_OUTLINE dnnl::memory weights_in(Dev& dev, dnnl::memory& user, const float* w,
                                           backend::onednn::Staged& st) {
    backend::onednn::bind(user, w);
    if (st.direct()) return user;
    if (w_version_ != 0 && st.shown == w && st.shown_version == w_version_) return st.mem;
    st.reorder.execute(dev.stream, user, st.mem);
    ++weight_reorders_;
    st.shown = w;
    st.shown_version = w_version_;
    return st.mem;
  }

  Cache cache_;
  ConvAlgorithm alg_ = ConvAlgorithm::Direct;
  ConvPrecision prec_ = ConvPrecision::F32;
  bool direct_ = true;                               // set_direct_kernels
  backend::onednn::direct::Scratch direct_scratch_;  // backward_images_bn's buffers
  backend::onednn::FlippedWeights direct_flip_;      // and its flipped weights
  backend::onednn::winograd::Layer direct_wino_;     // their Winograd (winograd_bn)
  std::size_t direct_backwards_ = 0, direct_forwards_ = 0, own_wino_calls_ = 0, winograd_bn_calls_ = 0;
  bool keep_input_ = false;
  const std::uint16_t* bf16_in_ = nullptr;  // set_bf16_input, for the next forward
  std::size_t bf16_inputs_ = 0;
  std::uint64_t w_version_ = 0;
  std::size_t weight_reorders_ = 0;
  std::size_t chunk_bytes_ = std::size_t(16) << 20;
  std::size_t gemm_max_pixels_ = 49, gemm_min_oc_ = 128;  // set_gemm_weights_limits
  bool bwd_via_fwd_ = true;                               // set_backward_data_via_forward
  bool own_weights_ = true;                               // set_own_weights
};

}  // namespace ops
}  // namespace cifarnet
