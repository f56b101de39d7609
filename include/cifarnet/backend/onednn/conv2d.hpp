// cifarnet/backend/onednn/conv2d.hpp — 2-D convolution on oneDNN (float):
// convolution_forward (direct, forward_training), backward_data and
// backward_weights, built once per geometry and kept in the op's cache.
//
// Activations stay in the plain nchw/nhwc layout of the geometry. The weights
// descriptor is format_tag::any: the caller's HWIO weights are reordered into
// the primitive's layout, and that copy is reused for as long as the
// caller's values are unchanged (checked by comparison with a copy, so a
// weight update is always seen); weight gradients come back into HWIO.
// Padding may be asymmetric: padding_l = {pt, pl}, padding_r = {pb, pr}.
// oneDNN 2.6 workaround: the jit_1x1 backward_weights kernels index their
// reduce-to-unit-stride buffer with the channel block instead of the channel
// count for nhwc sources, so 1x1 strided convolutions with few input channels
// write past it (SIGSEGV or wrong weights; oneDNN issue #6035). For nhwc 1x1
// convolutions with a stride or padding, backward_weights skips the jit_1x1
// implementations and takes the next one oneDNN offers.
//
// Algorithm (set_algorithm, from NetOptions::conv_algorithm; Direct unless
// set): with Winograd chosen for a geometry (nn/conv_algorithm.hpp), forward
// and backward_data use oneDNN's Winograd kernels, which need blocked
// activations: the plain input is reordered into a blocked scratch buffer
// and the blocked result back into the caller's plain buffer (two device
// scratch slots shared by every op, so no per-layer copies are kept).
// Where oneDNN offers no Winograd kernel for a geometry the op falls back
// to direct; backward_weights is always direct.
//
// dx, dw and db are overwritten; the bias is optional (nullptr) in forward
// and backward_weights.
#pragma once

#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>

#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/nn/conv_algorithm.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

/// Convolution with oneDNN primitives cached per ConvGeom (float only).
template <>
struct Conv2d<backend::OneDnn, float> {
  using Dev = Device<backend::OneDnn>;

  /// The algorithm policy for the calls that follow (default Direct).
  void set_algorithm(ConvAlgorithm a) { alg_ = a; }
  ConvAlgorithm algorithm() const { return alg_; }
  /// Whether the last geometry run uses Winograd (forward / backward_data).
  bool uses_winograd(const ConvGeom& g) const {
    const State* s = cache_.find(key(g));
    return s && s->wino;
  }

  /// forward() takes `relu` (a fused ReLU post-op).
  static constexpr bool fuses_relu = true;

  /// y = conv(x, w) + b (b may be nullptr); with `relu`, y = max(that, 0)
  /// computed in the same pass (a oneDNN post-op).
  void forward(Dev& dev, const ConvGeom& g, const float* x, const float* w, const float* b, float* y,
               bool relu = false) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d forward";
    on::check_geometry(g, op, false);
    on::require(op, {{x, "x"}, {w, "w"}, {y, "y"}});
    on::guarded(op, [&] {
      State& s = state(dev, g);
      Fwd& f = s.forward(cache_, dev.engine, b != nullptr, relu);
      dnnl::memory wm = weights_in(dev, s.w, w, f.w);
      dnnl::memory src = stage_in(dev, f.src, on::bind(s.x, x), 0);
      dnnl::memory dst = f.dst.direct() ? on::bind(s.y, y) : on::scratch(dev, f.dst.mem, 1);
      std::unordered_map<int, dnnl::memory> args{
          {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, dst}};
      if (b) args.emplace(DNNL_ARG_BIAS, on::bind(s.b, b));
      f.prim.execute(dev.stream, args);
      if (!f.dst.direct()) f.dst.reorder.execute(dev.stream, dst, on::bind(s.y, y));
      dev.stream.wait();
    });
  }

  /// dx = conv_transpose(dy, w), overwritten.
  void backward_data(Dev& dev, const ConvGeom& g, const float* dy, const float* w, float* dx) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d backward_data";
    on::check_geometry(g, op, false);
    on::require(op, {{dy, "dy"}, {w, "w"}, {dx, "dx"}});
    on::guarded(op, [&] {
      State& s = state(dev, g);
      BwdData& f = s.backward_data(cache_, dev.engine);
      dnnl::memory wm = weights_in(dev, s.w, w, f.w);
      dnnl::memory ddst = stage_in(dev, f.ddst, on::bind(s.y, dy), 0);
      dnnl::memory dsrc = f.dsrc.direct() ? on::bind(s.x, dx) : on::scratch(dev, f.dsrc.mem, 1);
      f.prim.execute(dev.stream,
                     {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, dsrc}});
      if (!f.dsrc.direct()) f.dsrc.reorder.execute(dev.stream, dsrc, on::bind(s.x, dx));
      dev.stream.wait();
    });
  }

  /// dw (HWIO) and db (if not nullptr) from x and dy, overwritten.
  void backward_weights(Dev& dev, const ConvGeom& g, const float* x, const float* dy, float* dw, float* db) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d backward_weights";
    on::check_geometry(g, op, false);
    on::require(op, {{x, "x"}, {dy, "dy"}, {dw, "dw"}});
    on::guarded(op, [&] {
      State& s = state(dev, g);
      BwdWeights& f = s.backward_weights(cache_, dev.engine, db != nullptr);
      dnnl::memory& user_dw = on::bind(s.w, dw);
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, on::bind(s.x, x)},
                                                 {DNNL_ARG_DIFF_DST, on::bind(s.y, dy)},
                                                 {DNNL_ARG_DIFF_WEIGHTS, f.dw.direct() ? user_dw : f.dw.mem}};
      if (db) args.emplace(DNNL_ARG_DIFF_BIAS, on::bind(s.b, db));
      f.prim.execute(dev.stream, args);
      if (!f.dw.direct()) f.dw.reorder.execute(dev.stream, f.dw.mem, user_dw);
      dev.stream.wait();
    });
  }

  /// Geometries whose primitives are cached now.
  std::size_t cached_geometries() const { return cache_.size(); }
  /// Primitives (including reorders) built so far; constant once every
  /// geometry and pass has been seen.
  std::size_t primitive_builds() const { return cache_.builds(); }

 private:
  struct State;
  using Key = decltype(std::tuple_cat(ConvGeom{}.key(), std::make_tuple(0)));
  using Cache = backend::onednn::PrimitiveCache<Key, State>;

  Key key(const ConvGeom& g) const { return std::tuple_cat(g.key(), std::make_tuple(int(alg_))); }

  // Winograd for this geometry under the policy `a` (oneDNN may still refuse).
  static bool want_winograd(ConvAlgorithm a, const ConvGeom& g) {
    const bool shape_ok = g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1;
    return shape_ok && (a == ConvAlgorithm::Winograd || (a == ConvAlgorithm::Auto && g.n <= 4));
  }

  struct Fwd {
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward prim;
    backend::onednn::Staged w, src, dst;  // src/dst staged only for Winograd's blocked layouts
  };
  struct BwdData {
    dnnl::convolution_backward_data::primitive_desc pd;
    dnnl::convolution_backward_data prim;
    backend::onednn::Staged w, ddst, dsrc;
  };
  struct BwdWeights {
    dnnl::convolution_backward_weights::primitive_desc pd;
    dnnl::convolution_backward_weights prim;
    backend::onednn::Staged dw;
  };

  // Everything built for one geometry. The user memories (x/y for src/dst
  // and their gradients, w for weights and their gradient, b for bias and
  // its gradient) are re-pointed at the caller's buffers on every call.
  struct State {
    dnnl::memory::desc src, dst, src_any, dst_any, w_user, w_any, bias;
    backend::onednn::dims strides, pad_l, pad_r;
    dnnl::memory x, y, w, b;
    bool avoid_rtus_1x1;  // see the oneDNN 2.6 workaround above
    bool wino;            // forward / backward_data use Winograd
    std::optional<dnnl::convolution_forward::primitive_desc> direct_hint_pd;
    std::optional<Fwd> fwd[4];  // [with bias + 2 * with ReLU post-op]
    std::optional<dnnl::convolution_forward::primitive_desc> hint_pd;
    std::optional<BwdData> bwd_data;
    std::optional<BwdWeights> bwd_weights[2];  // without / with bias

    State(const ConvGeom& g, bool winograd, const dnnl::engine& eng) : wino(winograd) {
      namespace on = backend::onednn;
      src = on::act_desc(g.fmt, g.n, g.ic, g.ih, g.iw);
      dst = on::act_desc(g.fmt, g.n, g.oc, g.oh, g.ow);
      src_any = dnnl::memory::desc(src.dims(), on::dt::f32, on::tag::any);
      dst_any = dnnl::memory::desc(dst.dims(), on::dt::f32, on::tag::any);
      const on::dims wd{on::dim(g.oc), on::dim(g.ic), on::dim(g.kh), on::dim(g.kw)};
      w_user = dnnl::memory::desc(wd, on::dt::f32, on::tag::hwio);
      w_any = dnnl::memory::desc(wd, on::dt::f32, on::tag::any);
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
    dnnl::convolution_forward::primitive_desc forward_pd(const dnnl::engine& eng, bool with_bias,
                                                         bool winograd, bool relu = false) const {
      using cf = dnnl::convolution_forward;
      const auto alg = winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;
      const auto& s = winograd ? src_any : src;
      const auto& d = winograd ? dst_any : dst;
      const auto pk = relu ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
      dnnl::primitive_attr attr;
      if (relu) {
        dnnl::post_ops po;
        po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
        attr.set_post_ops(po);
      }
      return with_bias
                 ? cf::primitive_desc(cf::desc(pk, alg, s, w_any, bias, d, strides, pad_l, pad_r), attr, eng)
                 : cf::primitive_desc(cf::desc(pk, alg, s, w_any, d, strides, pad_l, pad_r), attr, eng);
    }

    // Winograd when chosen and offered; a refusal switches this geometry to
    // direct for good (before anything was built with Winograd).
    dnnl::convolution_forward::primitive_desc chosen_forward_pd(const dnnl::engine& eng, bool with_bias,
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
    dnnl::convolution_forward::primitive_desc settled_forward_pd(const dnnl::engine& eng, bool with_bias,
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
    const dnnl::convolution_forward::primitive_desc& hint(const dnnl::engine& eng) {
      for (int i : {0, 1})  // the training forwards (no post-op)
        if (fwd[i]) return fwd[i]->pd;
      if (!hint_pd) hint_pd = chosen_forward_pd(eng, false);
      return *hint_pd;
    }

    // The direct forward descriptor backward_weights takes as its hint.
    const dnnl::convolution_forward::primitive_desc& direct_hint(const dnnl::engine& eng) {
      if (!wino) return hint(eng);
      if (!direct_hint_pd) direct_hint_pd = forward_pd(eng, false, false);
      return *direct_hint_pd;
    }

    Fwd& forward(Cache& c, const dnnl::engine& eng, bool with_bias, bool relu) {
      auto& f = fwd[int(with_bias) + 2 * int(relu)];
      if (!f) {
        const bool settled = fwd[0] || fwd[1] || fwd[2] || fwd[3] || hint_pd;  // `wino` already final
        auto pd =
            settled ? settled_forward_pd(eng, with_bias, relu) : chosen_forward_pd(eng, with_bias, relu);
        f = Fwd{pd, c.build<dnnl::convolution_forward>(pd), c.stage(eng, pd.weights_desc(), w_user, true),
                c.stage_scratch(eng, pd.src_desc(), src, true),
                c.stage_scratch(eng, pd.dst_desc(), dst, false)};
      }
      return *f;
    }

    BwdData& backward_data(Cache& c, const dnnl::engine& eng) {
      if (!bwd_data) {
        using cb = dnnl::convolution_backward_data;
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
        bwd_data = BwdData{*pd, c.build<cb>(*pd), c.stage(eng, pd->weights_desc(), w_user, true),
                           c.stage_scratch(eng, pd->diff_dst_desc(), dst, true),
                           c.stage_scratch(eng, pd->diff_src_desc(), src, false)};
      }
      return *bwd_data;
    }

    BwdWeights& backward_weights(Cache& c, const dnnl::engine& eng, bool with_bias) {
      auto& f = bwd_weights[with_bias];
      if (!f) {
        using cw = dnnl::convolution_backward_weights;
        const auto alg = dnnl::algorithm::convolution_direct;
        // The op descriptor must outlive next_impl(): oneDNN 2.6's
        // implementation iterator keeps a pointer to it.
        const cw::desc d = with_bias ? cw::desc(alg, src, w_any, bias, dst, strides, pad_l, pad_r)
                                     : cw::desc(alg, src, w_any, dst, strides, pad_l, pad_r);
        cw::primitive_desc pd(d, eng, direct_hint(eng));
        if (avoid_rtus_1x1)
          while (std::string(pd.impl_info_str()).rfind("jit_1x1", 0) == 0 && pd.next_impl()) {
          }
        f = BwdWeights{pd, c.build<cw>(pd), c.stage(eng, pd.diff_weights_desc(), w_user, false)};
      }
      return *f;
    }
  };

  State& state(Dev& dev, const ConvGeom& g) {
    return cache_.get(dev.engine, key(g), [&] { return State(g, want_winograd(alg_, g), dev.engine); });
  }

  // The plain buffer `user`, or its copy in the primitive's layout (in device
  // scratch slot `slot`).
  static dnnl::memory stage_in(Dev& dev, backend::onednn::Staged& st, dnnl::memory user, int slot) {
    if (st.direct()) return user;
    dnnl::memory m = backend::onednn::scratch(dev, st.mem, slot);
    st.reorder.execute(dev.stream, user, m);
    return m;
  }

  // The weights as the primitive wants them: the caller's HWIO buffer, or its
  // copy reordered into the primitive's layout.
  // The reordered copy is reused while the caller's values stay the same
  // (frozen weights, repeated inference): a compare is far cheaper than a
  // reorder, above all into Winograd's transformed layout.
  static dnnl::memory weights_in(Dev& dev, dnnl::memory& user, const float* w, backend::onednn::Staged& st) {
    backend::onednn::bind(user, w);
    if (st.direct()) return user;
    const std::size_t n = user.get_desc().get_size() / sizeof(float);
    if (st.shown.size() == n && std::memcmp(st.shown.data(), w, n * sizeof(float)) == 0) return st.mem;
    st.reorder.execute(dev.stream, user, st.mem);
    st.shown.assign(w, w + n);
    return st.mem;
  }

  Cache cache_;
  ConvAlgorithm alg_ = ConvAlgorithm::Direct;
};

}  // namespace ops
}  // namespace cifarnet
