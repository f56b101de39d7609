// cifarnet/backend/onednn/conv_epilogue.hpp — the plan executor's inference
// convolution on oneDNN (nn/executor.hpp): y = [max(., 0)](conv(x, w) + b
// [+ y]) as one forward_inference primitive, the residual sum and the ReLU
// as its post-ops, so that a folded convolution, the sum of a residual
// block and its ReLU are one pass over the output.
//
// Activations are in the network's plain layout (nchw/nhwc), float or bf16
// (uint16 bits): with bf16 products the executor keeps activations bf16
// between the convolutions that read them, so no layer rounds its input
// again. A float input of a bf16 convolution (the network's input, an
// activation a float layer also reads) is rounded into device scratch slot
// 2 first. The weights are the caller's HWIO floats (folded: nn/node_run.hpp),
// reordered into the primitive's layout (bf16 with bf16 products) and kept
// while the caller's buffer and version are the same (version 0: always
// reordered). Float accumulation; the bias, the sum and the ReLU in float
// before the one rounding of a bf16 output.
//
// Where the plan says so (`own`: the rule conv_epilogue_in_registers, which
// asks own_kernel_why_not), a float 3x3 stride-1 convolution of 16, 32 or
// 64 channels runs in the own kernels instead (direct_conv.hpp,
// forward_inference): the caller's HWIO weights as they are, the bias, the
// sum and the ReLU added to each register tile before it is stored, the
// sum's term read where it is (no copy into y first). Where the plan says
// so instead (`winograd`: the rule conv_winograd_epilogue, which asks
// winograd_why_not), a float NHWC 3x3 SAME convolution of 32 or more
// channels each way (multiples of 16) runs in the own Winograd kernels
// (winograd.hpp), the bias, the sum and the ReLU added in the output
// transform; its transformed weights are kept while the caller's buffer
// and version are the same, its work space is device scratch slot 0.
// Measured on a 2-core AMD EPYC Zen 2 (AVX2), batch 100, 2 threads, both
// with bias, residual sum and ReLU (docs/BENCHMARKS.md, 2026-12-04): the
// own direct kernel 2.42 ms at 32 channels (16x16) and 2.73 ms at 64
// (8x8), the own Winograd 1.74 and 1.33 ms; at 16 channels (32x32) direct
// 2.67 ms against Winograd's 5.03, so 16 channels stay direct.
#pragma once

#include <omp.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/backend/onednn/direct_conv.hpp"
#include "cifarnet/backend/onednn/winograd.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

template <class T>
struct ConvEpilogue<backend::OneDnn, T> {
  CIFARNET_ONEDNN_FLOAT_ONLY(ConvEpilogue, T);
  static constexpr bool supported = true;
  /// Whether bf16 activations and products are offered here (oneDNN's bf16
  /// convolutions: AVX-512 cores; elsewhere float).
  static bool bf16_storage() { return backend::onednn::cpu_has_bf16_convolutions(); }

  /// Why forward's `own` cannot run `g` here (empty: it can): the own
  /// kernels' geometry, float products, a CPU where they were measured
  /// ahead of oneDNN's (direct::own_inference_measured), at least as many
  /// images as threads (direct::inference_why_not).
  static std::string own_kernel_why_not(const ConvGeom& g, bool bf16) {
    return backend::onednn::direct::inference_why_not(g, bf16 && bf16_storage(), omp_get_max_threads());
  }

  /// Why forward's `winograd` cannot run `g` here (empty: it can): the own
  /// Winograd kernels' geometry (winograd::why_not), float products, 32 or
  /// more channels each way on AVX2 (at 16 the own direct kernel is faster
  /// there; on Zen 4's AVX-512 16 channels too), on a CPU where they were
  /// measured ahead of oneDNN's kernel: AVX2, or AVX-512 in 256-bit halves
  /// (direct::own_inference_measured; on Intel's AVX-512 not compared).
  static std::string winograd_why_not(const ConvGeom& g, bool bf16) {
    namespace on = backend::onednn;
    if (bf16) return "bf16 products (the own Winograd kernels are float)";
    std::string why = on::winograd::why_not(g);
    if (!why.empty()) return why;
    if (!on::direct::own_inference_measured())
      return "AVX-512 on full-width units: oneDNN's kernel (the own Winograd measured ahead of it in "
             "inference on AVX2 and on Zen 4's AVX-512 in halves only)";
    // 16 channels: on Zen 4, with each thread on its own tiles, ResNet-20
    // and -56 inference ran 1.22x and 1.31x as fast with their 16-channel
    // stage in the own Winograd kernels as in the own direct one (medians
    // of 5 rounds: docs/runs/bench/2026-12-06-zen4-own-inference/
    // wino16_ab.txt); on AVX2 the direct kernel was the faster one
    // (measured before those per-thread blocks).
    if ((g.ic < 32 || g.oc < 32) && !on::direct::avx512_in_halves())
      return std::to_string(g.ic) + " -> " + std::to_string(g.oc) +
             " channels (fewer than 32: the own direct kernel is faster there)";
    return {};
  }

  /// y = [relu](conv(x, w) + b [+ s]): x, s and y float, or bf16 bits where
  /// x_bf16 / s_bf16 / y_bf16; `bf16`: bf16 products (else float; then none
  /// may be bf16); s null: no sum; s == y: y holds the term (in place;
  /// then s_bf16 == y_bf16), else it is copied into y first; b may be null.
  /// `own`: in the own kernels (own_kernel_why_not(g, bf16) empty; float
  /// activations); `winograd`: in the own Winograd kernels
  /// (winograd_why_not(g, bf16) empty; float activations).
  CIFARNET_OUTLINE void forward(Device<backend::OneDnn>& dev, const ConvGeom& g, const void* x, bool x_bf16,
                                const T* w, const T* b, std::uint64_t version, bool bf16, const void* s,
                                bool s_bf16, void* y, bool y_bf16, bool relu, bool own = false,
                                bool winograd = false) {
    namespace on = backend::onednn;
    on::require("ConvEpilogue", {{x, "x"}, {w, "w"}, {y, "y"}});
    on::check_geometry(g, "ConvEpilogue", false);
    if ((x_bf16 || y_bf16 || (s && s_bf16)) && !(bf16 && bf16_storage()))
      throw ConfigError(
          "ConvEpilogue: bf16 activations need bf16 products on a CPU with bf16 convolutions (" +
          on::describe(g) + ")");
    bf16 = bf16 && bf16_storage();
    if (winograd) {  // as for `own`: what the kernels need, the plan asked the rest
      if (bf16 || x_bf16 || y_bf16 || (s && s_bf16) || !on::winograd::supports(g)) {
        const std::string why = winograd_why_not(g, bf16);
        throw std::logic_error("ConvEpilogue: asked for the own Winograd kernels where they do not run (" +
                               (why.empty() ? std::string("bf16 activations") : why) + "; " +
                               on::describe(g) + ")");
      }
      float* work = static_cast<float*>(dev.scratch(0, on::winograd::Layer::work_bytes(g)));
      winograd_.forward(g, static_cast<const float*>(x), w, version, b, relu, static_cast<float*>(y), work,
                        static_cast<const float*>(s));
      return;
    }
    if (own) {  // the plan asked own_kernel_why_not; here only what the kernels need (no strings per call)
      if (bf16 || x_bf16 || y_bf16 || (s && s_bf16) || !on::direct::supports(g)) {
        const std::string why = own_kernel_why_not(g, bf16);
        throw std::logic_error("ConvEpilogue: asked for the own kernels where they do not run (" +
                               (why.empty() ? std::string("bf16 activations") : why) + "; " +
                               on::describe(g) + ")");
      }
      on::direct::forward_inference(g, static_cast<const float*>(x), w, b, static_cast<const float*>(s),
                                    static_cast<float*>(y), relu);
      return;
    }
    if (s == y && s_bf16 != y_bf16)
      throw ConfigError("ConvEpilogue: a sum in place must have the output's type (" + on::describe(g) + ")");
    const bool sum = s != nullptr, sum_bf16 = sum && s_bf16;
    const Key key{g.key(), x_bf16, y_bf16, bf16, sum, relu, b != nullptr, sum_bf16};
    on::guarded("ConvEpilogue", [&] {
      State& st = cache_.get(dev.engine, key, [&] { return State(dev.engine, g, key); });
      if (sum && s != y) {  // the sum's other term into y (converted where its type differs)
        st.s.set_data_handle(const_cast<void*>(s));
        st.y.set_data_handle(y);
        st.copy_s.execute(dev.stream, st.s, st.y);
      }
      dnnl::memory src = st.x;
      src.set_data_handle(const_cast<void*>(x));
      if (st.round_x) {  // a float input of bf16 products: rounded once, into scratch
        on::scratch(dev, st.x_lp, 2);
        st.round_x->execute(dev.stream, src, st.x_lp);
        src = st.x_lp;
      }
      if (st.w_of != w || version == 0 || st.w_version != version) {
        st.w_reorder.execute(dev.stream, on::bind(st.w_user, w), st.w_mem);
        st.w_of = w;
        st.w_version = version;
      }
      st.y.set_data_handle(y);
      on::Args args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, st.w_mem}, {DNNL_ARG_DST, st.y}};
      if (b) args.insert({DNNL_ARG_BIAS, on::bind(st.b, b)});
      if (st.scratchpad) args.insert({DNNL_ARG_SCRATCHPAD, on::scratch(dev, *st.scratchpad, 3)});
      st.conv.execute(dev.stream, args);
      dev.stream.wait();
    });
  }

 private:
  using Key = std::tuple<decltype(ConvGeom{}.key()), bool, bool, bool, bool, bool, bool, bool>;
  struct State {
    CIFARNET_OUTLINE State(const dnnl::engine& eng, const ConvGeom& g, const Key& k) {
      namespace on = backend::onednn;
      const auto [gk, x_bf16, y_bf16, bf16, sum, relu, bias, sum_bf16] = k;
      (void)gk;
      const auto adt = bf16 ? on::dt::bf16 : on::dt::f32;
      const auto src_user = on::act_desc(g.fmt, g.n, g.ic, g.ih, g.iw, x_bf16 ? on::dt::bf16 : on::dt::f32);
      const auto src = on::act_desc(g.fmt, g.n, g.ic, g.ih, g.iw, adt);
      const auto dst = on::act_desc(g.fmt, g.n, g.oc, g.oh, g.ow, y_bf16 ? on::dt::bf16 : on::dt::f32);
      const on::dims wd{on::dim(g.oc), on::dim(g.ic), on::dim(g.kh), on::dim(g.kw)};
      const dnnl::memory::desc w_any(wd, adt, on::tag::any);
      w_user = dnnl::memory(dnnl::memory::desc(wd, on::dt::f32, on::tag::hwio), eng, DNNL_MEMORY_NONE);
      b = on::user_memory(on::vec_desc(g.oc), eng);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::post_ops po;
      if (sum) po.append_sum(1.f);
      if (relu) po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      attr.set_post_ops(po);
      using cf = dnnl::convolution_forward;
      const on::dims strides{on::dim(g.sh), on::dim(g.sw)}, pl{on::dim(g.pt), on::dim(g.pl)},
          pr{on::dim(g.pb), on::dim(g.pr)};
      const auto pk = dnnl::prop_kind::forward_inference;
      const auto alg = dnnl::algorithm::convolution_direct;
      const cf::primitive_desc pd =
          bias ? cf::primitive_desc(cf::desc(pk, alg, src, w_any, on::vec_desc(g.oc), dst, strides, pl, pr),
                                    attr, eng)
               : cf::primitive_desc(cf::desc(pk, alg, src, w_any, dst, strides, pl, pr), attr, eng);
      conv = cf(pd);
      w_mem = dnnl::memory(pd.weights_desc(), eng);
      w_reorder =
          dnnl::reorder(dnnl::reorder::primitive_desc(eng, w_user.get_desc(), eng, pd.weights_desc()));
      x = on::user_memory(src_user, eng);
      y = on::user_memory(dst, eng);
      if (src_user != src) {
        x_lp = dnnl::memory(src, eng, DNNL_MEMORY_NONE);
        round_x = dnnl::reorder(dnnl::reorder::primitive_desc(eng, src_user, eng, src));
      }
      if (sum) {
        const auto sd = on::act_desc(g.fmt, g.n, g.oc, g.oh, g.ow, sum_bf16 ? on::dt::bf16 : on::dt::f32);
        s = on::user_memory(sd, eng);
        copy_s = dnnl::reorder(dnnl::reorder::primitive_desc(eng, sd, eng, dst));
      }
      if (pd.scratchpad_desc().get_size() > 0)
        scratchpad = dnnl::memory(pd.scratchpad_desc(), eng, DNNL_MEMORY_NONE);
    }
    dnnl::convolution_forward conv;
    dnnl::memory x, x_lp, y, w_user, w_mem, b, s;
    dnnl::reorder copy_s;  // the sum's other term into y
    std::optional<dnnl::reorder> round_x;
    std::optional<dnnl::memory> scratchpad;
    dnnl::reorder w_reorder;
    const T* w_of = nullptr;
    std::uint64_t w_version = 0;
  };
  backend::onednn::PrimitiveCache<Key, State> cache_;
  backend::onednn::winograd::Layer winograd_;  // forward's `winograd`: transformed weights, kept
};

}  // namespace ops
}  // namespace cifarnet
