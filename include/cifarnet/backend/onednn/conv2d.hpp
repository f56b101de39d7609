// cifarnet/backend/onednn/conv2d.hpp — 2-D convolution on oneDNN (float):
// convolution_forward (direct, forward_training), backward_data and
// backward_weights, built once per geometry and kept in the op's cache.
//
// Activations stay in the plain nchw/nhwc layout of the geometry. The weights
// descriptor is format_tag::any: the caller's HWIO weights are reordered into
// the primitive's layout on every call (issue 7 will keep them reordered
// across a step), and weight gradients come back the same way into HWIO.
// Padding may be asymmetric: padding_l = {pt, pl}, padding_r = {pb, pr}.
// oneDNN 2.6 workaround: the jit_1x1 backward_weights kernels index their
// reduce-to-unit-stride buffer with the channel block instead of the channel
// count for nhwc sources, so 1x1 strided convolutions with few input channels
// write past it (SIGSEGV or wrong weights; oneDNN issue #6035). For nhwc 1x1
// convolutions with a stride or padding, backward_weights skips the jit_1x1
// implementations and takes the next one oneDNN offers.
//
// dx, dw and db are overwritten; the bias is optional (nullptr) in forward
// and backward_weights.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>

#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

/// Convolution with oneDNN primitives cached per ConvGeom (float only).
template <>
struct Conv2d<backend::OneDnn, float> {
  using Dev = Device<backend::OneDnn>;

  /// y = conv(x, w) + b (b may be nullptr).
  void forward(Dev& dev, const ConvGeom& g, const float* x, const float* w, const float* b, float* y) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Conv2d forward";
    on::check_geometry(g, op, false);
    on::require(op, {{x, "x"}, {w, "w"}, {y, "y"}});
    on::guarded(op, [&] {
      State& s = state(dev, g);
      Fwd& f = s.forward(cache_, dev.engine, b != nullptr);
      dnnl::memory wm = weights_in(dev, s.w, w, f.w);
      std::unordered_map<int, dnnl::memory> args{
          {DNNL_ARG_SRC, on::bind(s.x, x)}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, on::bind(s.y, y)}};
      if (b) args.emplace(DNNL_ARG_BIAS, on::bind(s.b, b));
      f.prim.execute(dev.stream, args);
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
      f.prim.execute(dev.stream, {{DNNL_ARG_DIFF_DST, on::bind(s.y, dy)},
                                  {DNNL_ARG_WEIGHTS, wm},
                                  {DNNL_ARG_DIFF_SRC, on::bind(s.x, dx)}});
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
  using Cache = backend::onednn::PrimitiveCache<decltype(ConvGeom{}.key()), State>;

  struct Fwd {
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward prim;
    backend::onednn::Staged w;
  };
  struct BwdData {
    dnnl::convolution_backward_data::primitive_desc pd;
    dnnl::convolution_backward_data prim;
    backend::onednn::Staged w;
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
    dnnl::memory::desc src, dst, w_user, w_any, bias;
    backend::onednn::dims strides, pad_l, pad_r;
    dnnl::memory x, y, w, b;
    bool avoid_rtus_1x1;        // see the oneDNN 2.6 workaround above
    std::optional<Fwd> fwd[2];  // without / with bias
    std::optional<dnnl::convolution_forward::primitive_desc> hint_pd;
    std::optional<BwdData> bwd_data;
    std::optional<BwdWeights> bwd_weights[2];  // without / with bias

    State(const ConvGeom& g, const dnnl::engine& eng) {
      namespace on = backend::onednn;
      src = on::act_desc(g.fmt, g.n, g.ic, g.ih, g.iw);
      dst = on::act_desc(g.fmt, g.n, g.oc, g.oh, g.ow);
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

    dnnl::convolution_forward::primitive_desc forward_pd(const dnnl::engine& eng, bool with_bias) const {
      using cf = dnnl::convolution_forward;
      const auto alg = dnnl::algorithm::convolution_direct;
      const auto pk = dnnl::prop_kind::forward_training;
      return with_bias
                 ? cf::primitive_desc(cf::desc(pk, alg, src, w_any, bias, dst, strides, pad_l, pad_r), eng)
                 : cf::primitive_desc(cf::desc(pk, alg, src, w_any, dst, strides, pad_l, pad_r), eng);
    }

    // The forward descriptor the backward passes take as their hint.
    const dnnl::convolution_forward::primitive_desc& hint(const dnnl::engine& eng) {
      for (auto& f : fwd)
        if (f) return f->pd;
      if (!hint_pd) hint_pd = forward_pd(eng, false);
      return *hint_pd;
    }

    Fwd& forward(Cache& c, const dnnl::engine& eng, bool with_bias) {
      auto& f = fwd[with_bias];
      if (!f) {
        auto pd = forward_pd(eng, with_bias);
        f = Fwd{pd, c.build<dnnl::convolution_forward>(pd), c.stage(eng, pd.weights_desc(), w_user, true)};
      }
      return *f;
    }

    BwdData& backward_data(Cache& c, const dnnl::engine& eng) {
      if (!bwd_data) {
        using cb = dnnl::convolution_backward_data;
        cb::primitive_desc pd(
            cb::desc(dnnl::algorithm::convolution_direct, src, w_any, dst, strides, pad_l, pad_r), eng,
            hint(eng));
        bwd_data = BwdData{pd, c.build<cb>(pd), c.stage(eng, pd.weights_desc(), w_user, true)};
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
        cw::primitive_desc pd(d, eng, hint(eng));
        if (avoid_rtus_1x1)
          while (std::string(pd.impl_info_str()).rfind("jit_1x1", 0) == 0 && pd.next_impl()) {
          }
        f = BwdWeights{pd, c.build<cw>(pd), c.stage(eng, pd.diff_weights_desc(), w_user, false)};
      }
      return *f;
    }
  };

  State& state(Dev& dev, const ConvGeom& g) {
    return cache_.get(dev.engine, g.key(), [&] { return State(g, dev.engine); });
  }

  // The weights as the primitive wants them: the caller's HWIO buffer, or its
  // copy reordered into the primitive's layout.
  static dnnl::memory weights_in(Dev& dev, dnnl::memory& user, const float* w, backend::onednn::Staged& st) {
    backend::onednn::bind(user, w);
    if (st.direct()) return user;
    st.reorder.execute(dev.stream, user, st.mem);
    return st.mem;
  }

  Cache cache_;
};

}  // namespace ops
}  // namespace cifarnet
