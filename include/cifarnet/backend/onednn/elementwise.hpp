// cifarnet/backend/onednn/elementwise.hpp — the oneDNN backend's parameter-
// free ops outside convolution and normalization (float):
//  - Eltwise::add: oneDNN's binary_add primitive, with the ReLU as an
//    eltwise post-op (one pass); Eltwise::affine: eltwise_linear. Flat 1-D
//    tensors (tag a), primitives cached per element count (and constants).
//    Eltwise::add_masked (three sources) and add_masked_bits (the mask as
//    bits): own OpenMP loops.
//  - GlobalAvgPool: oneDNN average pooling with the window the whole h×w
//    plane (ops::Pool2d<OneDnn> over that geometry), forward and backward.
//  - ChannelPad: host copies (backend/host/channel_pad.hpp: oneDNN has no
//    padding primitive).
//  - Arena (the optimizers' flat passes): host OpenMP loops.
//  - SoftmaxCrossEntropy, BnStats, SyncBatchNorm: host loops in double
//    (backend/host/): n×k logits and per-channel vectors are tiny, and
//    oneDNN's softmax would round the loss in float.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>

#include "cifarnet/backend/host/arena.hpp"
#include "cifarnet/backend/host/bytes.hpp"
#include "cifarnet/backend/host/bn_stats.hpp"
#include "cifarnet/backend/host/channel_pad.hpp"
#include "cifarnet/backend/host/classify.hpp"
#include "cifarnet/backend/host/mask_bits.hpp"
#include "cifarnet/backend/host/prefetch.hpp"
#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/backend/onednn/pool2d.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct Eltwise<backend::OneDnn, T> {
  CIFARNET_ONEDNN_FLOAT_ONLY(Eltwise, T);
  using Dev = Device<backend::OneDnn>;

  /// Byte images (h, w, c interleaved) to the float batch tensor: an own
  /// OpenMP loop (a oneDNN u8 -> f32 reorder would not interleave-transpose
  /// to NCHW in one pass).
  CIFARNET_OUTLINE void from_bytes(Dev&, std::size_t count, std::size_t c, std::size_t h, std::size_t w,
                                   DataFormat fmt, const std::uint8_t* src, float* dst) {
    backend::host::bytes_to_float(count, c, h, w, fmt, src, dst);
  }

  /// y = a + b (then ReLU); y may alias a or b.
  CIFARNET_OUTLINE void add(Dev& dev, std::size_t n, const float* a, const float* b, float* y, bool relu) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Eltwise add";
    check(n, op);
    on::require(op, {{a, "a"}, {b, "b"}, {y, "y"}});
    // oneDNN's binary runs in place only on source 0, and a float sum is the
    // same either way round: the operand y aliases goes first.
    if (y == b) std::swap(a, b);
    on::guarded(op, [&] {
      Flat& s = flat(dev, {n, relu ? 1 : 0, 0.f, 0.f});
      if (!s.p) {
        dnnl::primitive_attr attr;
        if (relu) {
          dnnl::post_ops po;
          po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
          attr.set_post_ops(po);
        }
        s.p = cache_.template build<dnnl::binary>(dnnl::binary::primitive_desc(
            dnnl::binary::desc(dnnl::algorithm::binary_add, s.data, s.data, s.data), attr, dev.engine));
      }
      s.p->execute(dev.stream, {{DNNL_ARG_SRC_0, on::bind(s.a, a)},
                                {DNNL_ARG_SRC_1, on::bind(s.b, b)},
                                {DNNL_ARG_DST, on::bind(s.c, y)}});
      dev.stream.wait();
    });
  }

  /// y = a + b where m > 0, else 0 (y may alias a or b). An own OpenMP loop:
  /// oneDNN's binary takes two sources, so it would be two passes.
  CIFARNET_OUTLINE void add_masked(Dev&, std::size_t n, const float* a, const float* b, const float* m,
                                   float* y) {
    static constexpr const char* op = "Eltwise add_masked";
    check(n, op);
    backend::onednn::require(op, {{a, "a"}, {b, "b"}, {m, "m"}, {y, "y"}});
    for_lines(
        n,
        [&](std::size_t i0, std::size_t i1) {
          backend::host::prefetch_ahead(m + i0);
#pragma omp simd
          for (std::size_t i = i0; i < i1; ++i) y[i] = backend::host::keep_if(m[i] > 0.f, a[i] + b[i]);
        },
        a, b);
  }

  /// y = a + b where bit i % 16 of bits[i / 16] is set, else 0 (y may alias
  /// a or b): add_masked with the mask as bits (host/mask_bits.hpp), which
  /// batch norm writes with a residual sum (BatchNorm::forward_train_sum).
  /// Each of a, b and y is float or bfloat16 bits (std::uint16_t): the
  /// residual gradients handed over in bf16 (nn/sequential.hpp), widened
  /// exactly, the sum rounded to nearest even for a bf16 y. Null bits: no
  /// mask (y = a + b; a residual block whose input is not a block's
  /// output). n must be a multiple of 16. An own OpenMP loop, as add_masked.
  template <class A, class Bv, class Y>
  CIFARNET_OUTLINE void add_masked_bits(Dev&, std::size_t n, const A* a, const Bv* b,
                                        const std::uint16_t* bits, Y* y) {
    static constexpr const char* op = "Eltwise add_masked_bits";
    check(n, op);
    if (n % 16 != 0)
      throw ShapeError(
          detail::concat(op, ": ", n, " elements, not a multiple of the mask's 16-element words"));
    backend::onednn::require(op, {{a, "a"}, {b, "b"}, {y, "y"}});
    for_lines(
        n,
        [&](std::size_t i0, std::size_t) {
          backend::host::add_masked_word(a + i0, b + i0, bits ? bits[i0 / 16] : std::uint16_t(0xFFFF),
                                         y + i0);
        },
        a, b);
  }

  /// add_masked_bits (bits null: no mask) or add_masked (mask_relu: the
  /// ReLU's output, > 0) with b the backward of a K = S average pool of a
  /// channel-padded gradient, formed on the fly: b[n, y, x, c] =
  /// pooled[((n OH + y / s) OW + x / s) channels + c] / (s s), OH = h / s,
  /// OW = w / s, 0 outside every window (ResNet's downsampling shortcut, its
  /// gradient never written: RunContext::grad_sum's `pooled`). g: a's and
  /// y's NHWC geometry; pooled at the first image's first pixel's channel
  /// `before`; y may alias a. The float operations of avg_pool::backward
  /// and the sum, so the same bits. An own OpenMP loop over rows.
  CIFARNET_OUTLINE void add_pooled(Dev&, const ChannelGeom& g, const float* a, const float* pooled,
                                   std::size_t channels, std::size_t s, const std::uint16_t* bits,
                                   const float* mask_relu, float* y) {
    static constexpr const char* op = "Eltwise add_pooled";
    backend::onednn::require(op, {{a, "a"}, {pooled, "pooled"}, {y, "y"}});
    if (g.fmt != DataFormat::NHWC || s == 0 || channels < g.c || (bits && mask_relu) ||
        (bits && g.c % 16 != 0))
      throw ConfigError(detail::concat(op, ": NHWC, a stride, ", channels, " >= ", g.c,
                                       " channels, one mask (bits need channels a multiple of 16)"));
    const std::size_t C = g.c, OH = g.h / s, OW = g.w / s;
    const float count = float(s * s);
    const std::ptrdiff_t rows = std::ptrdiff_t(g.n * g.h);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      const std::size_t n = std::size_t(r) / g.h, iy = std::size_t(r) % g.h, oy = iy / s;
      for (std::size_t ix = 0; ix < g.w; ++ix) {
        const std::size_t i = (std::size_t(r) * g.w + ix) * C, ox = ix / s;
        const bool in = oy < OH && ox < OW;
        const float* __restrict p = pooled + ((n * OH + oy) * OW + ox) * channels;
        const float* __restrict ai = a + i;
        float* __restrict yi = y + i;
        // The pooled term of channel c: p[c] / count inside a window, else
        // 0 (p is not read there). `in` is tested outside the loops and the
        // masks applied with keep_if, so each loop vectorizes without mask
        // registers (host/mask_bits.hpp).
        auto pooled_at = [&](std::size_t c) { return in ? p[c] / count : 0.f; };
        if (bits) {
          for (std::size_t c0 = 0; c0 < C; c0 += 16) {
            const std::uint16_t w = bits[(i + c0) / 16];
            if (in) {
#pragma omp simd
              for (std::size_t l = 0; l < 16; ++l)
                yi[c0 + l] = backend::host::keep_if(w >> l & 1u, ai[c0 + l] + p[c0 + l] / count);
            } else {
#pragma omp simd
              for (std::size_t l = 0; l < 16; ++l)
                yi[c0 + l] = backend::host::keep_if(w >> l & 1u, ai[c0 + l] + 0.f);
            }
          }
        } else if (mask_relu) {
          const float* __restrict m = mask_relu + i;
          if (in) {
#pragma omp simd
            for (std::size_t c = 0; c < C; ++c)
              yi[c] = backend::host::keep_if(m[c] > 0.f, ai[c] + p[c] / count);
          } else {
#pragma omp simd
            for (std::size_t c = 0; c < C; ++c) yi[c] = backend::host::keep_if(m[c] > 0.f, ai[c] + 0.f);
          }
        } else {
#pragma omp simd
          for (std::size_t c = 0; c < C; ++c) yi[c] = ai[c] + pooled_at(c);
        }
      }
    }
  }

  /// add_masked_bits with b the backward of an S x S average pool of a
  /// channel-padded gradient, formed on the fly as add_pooled forms it (the
  /// same float b[i] = pooled[...] / (S S), 0 outside every window), a and
  /// y each float or bfloat16 bits: the training executor's sum of a
  /// downsampling block's input gradient (pooled_gradient_in_sum), whose
  /// pool then writes no dx. g: a's and y's NHWC geometry (channels a
  /// multiple of 16); bits null: no mask. The same bits as add_masked_bits
  /// on the pool's float dx.
  template <class A, class Y>
  CIFARNET_OUTLINE void add_pooled_bits(Dev&, const ChannelGeom& g, const A* a, const float* pooled,
                                        std::size_t channels, std::size_t s, const std::uint16_t* bits,
                                        Y* y) {
    static constexpr const char* op = "Eltwise add_pooled_bits";
    backend::onednn::require(op, {{a, "a"}, {pooled, "pooled"}, {y, "y"}});
    if (g.fmt != DataFormat::NHWC || s == 0 || channels < g.c || g.c % 16 != 0)
      throw ConfigError(detail::concat(op, ": NHWC, a stride, ", channels, " >= ", g.c,
                                       " channels, a multiple of 16 (", g.c, ")"));
    const std::size_t C = g.c, OH = g.h / s, OW = g.w / s;
    const float count = float(s * s);
    const std::ptrdiff_t rows = std::ptrdiff_t(g.n * g.h);
    auto word = [&](std::size_t i) { return bits ? bits[i / 16] : std::uint16_t(0xFFFF); };
#if defined(__AVX512F__)
    // Each pooled value divided once and added to the s pixels of its
    // window in this row, as add_masked_word's AVX-512 form adds (the same
    // division and masked sum: the same bits).
    namespace hd = backend::host::detail;
    const __m512 cnt = _mm512_set1_ps(count);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      const std::size_t n = std::size_t(r) / g.h, oy = std::size_t(r) % g.h / s;
      const std::size_t row = std::size_t(r) * g.w * C, covered = oy < OH ? OW * s : 0;
      for (std::size_t ox = 0; ox * s < covered; ++ox) {
        const float* p = pooled + ((n * OH + oy) * OW + ox) * channels;
        for (std::size_t c0 = 0; c0 < C; c0 += 16) {
          const __m512 b = _mm512_div_ps(_mm512_loadu_ps(p + c0), cnt);
          for (std::size_t kx = 0; kx < s; ++kx) {
            const std::size_t i = row + (ox * s + kx) * C + c0;
            hd::store16(_mm512_maskz_add_ps(__mmask16(word(i)), hd::load16(a + i), b), y + i);
          }
        }
      }
      for (std::size_t i = row + covered * C; i < row + g.w * C; i += 16)  // no window: + 0
        hd::store16(_mm512_maskz_add_ps(__mmask16(word(i)), hd::load16(a + i), _mm512_setzero_ps()), y + i);
    }
#else
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      const std::size_t n = std::size_t(r) / g.h, iy = std::size_t(r) % g.h, oy = iy / s;
      for (std::size_t ix = 0; ix < g.w; ++ix) {
        const std::size_t i = (std::size_t(r) * g.w + ix) * C, ox = ix / s;
        const bool in = oy < OH && ox < OW;
        const float* __restrict p = pooled + ((n * OH + oy) * OW + ox) * channels;
        for (std::size_t c0 = 0; c0 < C; c0 += 16) {
          alignas(64) float b[16];
          if (in) {
#pragma omp simd
            for (std::size_t l = 0; l < 16; ++l) b[l] = p[c0 + l] / count;
          } else {
            for (std::size_t l = 0; l < 16; ++l) b[l] = 0.f;
          }
          backend::host::add_masked_word(a + i + c0, b, word(i + c0), y + i + c0);
        }
      }
    }
#endif
  }

  /// y = x·a + b; x == y allowed.
  CIFARNET_OUTLINE void affine(Dev& dev, std::size_t n, const float* x, float a, float b, float* y) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Eltwise affine";
    check(n, op);
    on::require(op, {{x, "x"}, {y, "y"}});
    on::guarded(op, [&] {
      Flat& s = flat(dev, {n, 2, a, b});
      if (!s.p) {
        using ef = dnnl::eltwise_forward;
        s.p = cache_.template build<ef>(ef::primitive_desc(
            ef::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_linear, s.data, a, b),
            dev.engine));
      }
      s.p->execute(dev.stream, {{DNNL_ARG_SRC, on::bind(s.a, x)}, {DNNL_ARG_DST, on::bind(s.c, y)}});
      dev.stream.wait();
    });
  }

  /// Primitives built so far.
  CIFARNET_OUTLINE std::size_t primitive_builds() const { return cache_.builds(); }

 private:
  // f(i0, i1) for every run [i0, i1) of 16 elements (a cache line of floats;
  // the last run may be shorter), in parallel over chunks of 16384 elements
  // (64 KiB of a float operand per task), after prefetching the lines ahead
  // of a and b (host/prefetch.hpp).
  template <class F, class A, class Bv>
  static void for_lines(std::size_t n, F&& f, const A* a, const Bv* b) {
    constexpr std::size_t kChunk = 16384;
    const long chunks = long((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (long c = 0; c < chunks; ++c) {
      const std::size_t b0 = std::size_t(c) * kChunk, e = std::min(n, b0 + kChunk);
      for (std::size_t i0 = b0; i0 < e; i0 += 16) {
        backend::host::prefetch_ahead(a + i0);
        backend::host::prefetch_ahead(b + i0);
        f(i0, std::min(e, i0 + 16));
      }
    }
  }

  // (element count, kind: 0 add, 1 add+ReLU, 2 affine, affine's a and b)
  using Key = std::tuple<std::size_t, int, float, float>;
  struct Flat {
    dnnl::memory::desc data;
    dnnl::memory a, b, c;  // caller buffers, re-pointed per call
    std::optional<dnnl::primitive> p;
    CIFARNET_OUTLINE Flat(std::size_t n, const dnnl::engine& eng) : data(backend::onednn::vec_desc(n)) {
      for (dnnl::memory* m : {&a, &b, &c}) *m = backend::onednn::user_memory(data, eng);
    }
  };
  CIFARNET_OUTLINE static void check(std::size_t n, const char* op) {
    if (n == 0) throw ShapeError(detail::concat(op, ": empty tensor (n = 0)"));
  }
  CIFARNET_OUTLINE Flat& flat(Dev& dev, const Key& k) {
    return cache_.get(dev.engine, k, [&] { return Flat(std::get<0>(k), dev.engine); });
  }
  backend::onednn::PrimitiveCache<Key, Flat> cache_{16};
};

/// The mean over h·w as oneDNN average pooling with an h×w window.
template <class T>
struct GlobalAvgPool<backend::OneDnn, T> {
  CIFARNET_ONEDNN_FLOAT_ONLY(GlobalAvgPool, T);
  using Dev = Device<backend::OneDnn>;
  CIFARNET_OUTLINE void forward(Dev& dev, const ChannelGeom& g, const float* x, float* y) {
    pool_.forward(dev, window(g), PoolKind::Avg, false, x, y);
  }
  CIFARNET_OUTLINE void backward(Dev& dev, const ChannelGeom& g, const float* dy, float* dx) {
    // Average pooling's backward reads no input values: dx (the input's
    // size) stands in for x.
    pool_.backward(dev, window(g), PoolKind::Avg, dx, nullptr, dy, dx);
  }
  CIFARNET_OUTLINE std::size_t primitive_builds() const { return pool_.primitive_builds(); }

 private:
  CIFARNET_OUTLINE static ConvGeom window(const ChannelGeom& g) {
    ConvGeom p;
    p.fmt = g.fmt;
    p.n = g.n;
    p.ic = p.oc = g.c;
    p.ih = p.kh = p.sh = g.h;
    p.iw = p.kw = p.sw = g.w;
    p.oh = p.ow = 1;
    return p;
  }
  Pool2d<backend::OneDnn, float> pool_;
};

template <class T>
struct ChannelPad<backend::OneDnn, T> : backend::host::ChannelPadOp<float> {
  CIFARNET_ONEDNN_FLOAT_ONLY(ChannelPad, T);
};
template <class T>
struct SoftmaxCrossEntropy<backend::OneDnn, T> : backend::host::SoftmaxCrossEntropyOp<float> {
  CIFARNET_ONEDNN_FLOAT_ONLY(SoftmaxCrossEntropy, T);
};
template <class T>
struct BnStats<backend::OneDnn, T> : backend::host::BnStatsOp<float> {
  CIFARNET_ONEDNN_FLOAT_ONLY(BnStats, T);
};
template <class T>
struct SyncBatchNorm<backend::OneDnn, T> : backend::host::SyncBatchNormOp<float> {
  CIFARNET_ONEDNN_FLOAT_ONLY(SyncBatchNorm, T);
};
/// The optimizers' flat passes: host loops (backend/host/arena.hpp; oneDNN
/// has no optimizer primitives).
template <class T>
struct Arena<backend::OneDnn, T> : backend::host::ArenaOp<float> {
  CIFARNET_ONEDNN_FLOAT_ONLY(Arena, T);
};

}  // namespace ops
}  // namespace cifarnet
