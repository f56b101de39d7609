// cifarnet/backend/onednn/batch_norm.hpp — batch normalization on oneDNN
// (float), per channel over (n, h, w), with separate scale (gamma) and shift
// (beta): batch_normalization_forward in training (batch mean and the biased
// batch variance, both written to the caller's buffers) and in inference
// (use_global_stats with the caller's mean and variance), and
// batch_normalization_backward (prop_kind::backward: dx, dgamma, dbeta, all
// overwritten). Primitives are cached per (geometry, epsilon, relu).
//
// With relu = true the ReLU that follows is fused (oneDNN fuse_norm_relu):
// forward writes max(bn(x), 0); the training forward records which outputs
// were positive in a workspace kept per geometry, and backward takes the
// gradient of the ReLU's output (dy) and applies that mask itself, so a
// fused backward must follow the training forward of the same geometry.
#pragma once

#include <algorithm>
#include <optional>
#include <tuple>

#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

/// Batch normalization with oneDNN primitives cached per ChannelGeom (float).
template <>
struct BatchNorm<backend::OneDnn, float> {
  using Dev = Device<backend::OneDnn>;
  /// forward_train / forward_infer / backward take `relu` (fused ReLU).
  static constexpr bool fuses_relu = true;

  /// y = gamma (x - mean) / sqrt(var + eps) + beta with the batch statistics,
  /// which are returned in mean and var (biased variance).
  /// With `relu`, y = max(bn(x), 0) (fused).
  void forward_train(Dev& dev, const ChannelGeom& g, double eps, const float* x, const float* gamma,
                     const float* beta, float* y, float* mean, float* var, bool relu = false) {
    namespace on = backend::onednn;
    static constexpr const char* op = "BatchNorm forward_train";
    on::check_geometry(g, op);
    on::require(op, {{x, "x"}, {gamma, "gamma"}, {beta, "beta"}, {y, "y"}, {mean, "mean"}, {var, "var"}});
    on::guarded(op, [&] {
      State& s = state(dev, g, eps, relu);
      dnnl::primitive& p = s.train(cache_, dev.engine);
      on::Args args{{DNNL_ARG_SRC, on::bind(s.x, x)},         {DNNL_ARG_SCALE, on::bind(s.gamma, gamma)},
                    {DNNL_ARG_SHIFT, on::bind(s.beta, beta)}, {DNNL_ARG_DST, on::bind(s.y, y)},
                    {DNNL_ARG_MEAN, on::bind(s.mean, mean)},  {DNNL_ARG_VARIANCE, on::bind(s.var, var)}};
      if (s.workspace) args.emplace(DNNL_ARG_WORKSPACE, *s.workspace);
      p.execute(dev.stream, args);
      dev.stream.wait();
    });
  }

  /// y = gamma (x - mean) / sqrt(var + eps) + beta with the given statistics.
  /// With `relu`, y = max(bn(x), 0) (fused).
  void forward_infer(Dev& dev, const ChannelGeom& g, double eps, const float* x, const float* gamma,
                     const float* beta, const float* mean, const float* var, float* y, bool relu = false) {
    namespace on = backend::onednn;
    static constexpr const char* op = "BatchNorm forward_infer";
    on::check_geometry(g, op);
    on::require(op, {{x, "x"}, {gamma, "gamma"}, {beta, "beta"}, {mean, "mean"}, {var, "var"}, {y, "y"}});
    on::guarded(op, [&] {
      State& s = state(dev, g, eps, relu);
      dnnl::primitive& p = s.infer(cache_, dev.engine);
      p.execute(dev.stream, {{DNNL_ARG_SRC, on::bind(s.x, x)},
                             {DNNL_ARG_SCALE, on::bind(s.gamma, gamma)},
                             {DNNL_ARG_SHIFT, on::bind(s.beta, beta)},
                             {DNNL_ARG_MEAN, on::bind(s.mean, mean)},
                             {DNNL_ARG_VARIANCE, on::bind(s.var, var)},
                             {DNNL_ARG_DST, on::bind(s.y, y)}});
      dev.stream.wait();
    });
  }

  /// dx, dgamma, dbeta of the training-mode forward, given the statistics it
  /// returned (all three overwritten). With `relu`, dy is the gradient of
  /// the fused ReLU's output and the last forward_train(relu = true) of this
  /// geometry supplies the mask.
  void backward(Dev& dev, const ChannelGeom& g, double eps, const float* x, const float* dy,
                const float* gamma, const float* mean, const float* var, float* dx, float* dgamma,
                float* dbeta, bool relu = false) {
    namespace on = backend::onednn;
    static constexpr const char* op = "BatchNorm backward";
    on::check_geometry(g, op);
    on::require(op, {{x, "x"},
                     {dy, "dy"},
                     {gamma, "gamma"},
                     {mean, "mean"},
                     {var, "var"},
                     {dx, "dx"},
                     {dgamma, "dgamma"},
                     {dbeta, "dbeta"}});
    on::guarded(op, [&] {
      State& s = state(dev, g, eps, relu);
      if (relu && !s.trained)
        throw ConfigError(
            detail::concat(op, ": fused ReLU backward without a training forward (", on::describe(g), ")"));
      dnnl::primitive& p = s.backward(cache_, dev.engine);
      on::Args args{{DNNL_ARG_SRC, on::bind(s.x, x)},
                    {DNNL_ARG_DIFF_DST, on::bind(s.y, dy)},
                    {DNNL_ARG_SCALE, on::bind(s.gamma, gamma)},
                    {DNNL_ARG_SHIFT, s.backward_shift(dev.engine)},
                    {DNNL_ARG_MEAN, on::bind(s.mean, mean)},
                    {DNNL_ARG_VARIANCE, on::bind(s.var, var)},
                    {DNNL_ARG_DIFF_SRC, on::bind(s.dx, dx)},
                    {DNNL_ARG_DIFF_SCALE, on::bind(s.dgamma, dgamma)},
                    {DNNL_ARG_DIFF_SHIFT, on::bind(s.dbeta, dbeta)}};
      if (s.workspace) args.emplace(DNNL_ARG_WORKSPACE, *s.workspace);
      p.execute(dev.stream, args);
      dev.stream.wait();
    });
  }

  /// Geometries whose primitives are cached now.
  std::size_t cached_geometries() const { return cache_.size(); }
  /// Primitives built so far.
  std::size_t primitive_builds() const { return cache_.builds(); }

 private:
  struct State;
  using Key = std::tuple<decltype(ChannelGeom{}.key()), double, bool>;
  using Cache = backend::onednn::PrimitiveCache<Key, State>;

  struct State {
    dnnl::memory::desc data, stat;
    float eps;
    bool relu;             // fuse_norm_relu
    bool trained = false;  // a training forward has filled the workspace
    dnnl::memory x, y, dx, gamma, beta, mean, var, dgamma, dbeta;
    std::optional<dnnl::batch_normalization_forward::primitive_desc> train_pd;
    std::optional<dnnl::primitive> train_p, infer_p, bwd_p;
    std::optional<dnnl::memory> zero_shift, workspace;

    State(const ChannelGeom& g, double epsilon, bool fuse_relu, const dnnl::engine& eng)
        : eps(float(epsilon)), relu(fuse_relu) {
      namespace on = backend::onednn;
      data = on::act_desc(g.fmt, g.n, g.c, g.h, g.w);
      stat = on::vec_desc(g.c);
      x = on::user_memory(data, eng);
      y = on::user_memory(data, eng);
      dx = on::user_memory(data, eng);
      for (dnnl::memory* m : {&gamma, &beta, &mean, &var, &dgamma, &dbeta}) *m = on::user_memory(stat, eng);
    }

    dnnl::normalization_flags scale_shift() const {
      const auto f = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
      return relu ? f | dnnl::normalization_flags::fuse_norm_relu : f;
    }

    // oneDNN 2.6's backward with use_shift insists on a DNNL_ARG_SHIFT input
    // although the gradients do not depend on beta; it gets a zero vector.
    dnnl::memory& backward_shift(const dnnl::engine& eng) {
      if (!zero_shift) {
        zero_shift = dnnl::memory(stat, eng);
        auto* p = static_cast<float*>(zero_shift->get_data_handle());
        std::fill(p, p + stat.get_size() / sizeof(float), 0.f);
      }
      return *zero_shift;
    }

    const dnnl::batch_normalization_forward::primitive_desc& training_pd(const dnnl::engine& eng) {
      using bf = dnnl::batch_normalization_forward;
      if (!train_pd) {
        train_pd =
            bf::primitive_desc(bf::desc(dnnl::prop_kind::forward_training, data, eps, scale_shift()), eng);
        if (train_pd->workspace_desc().get_size() != 0)
          workspace = dnnl::memory(train_pd->workspace_desc(), eng);
      }
      return *train_pd;
    }

    dnnl::primitive& train(Cache& c, const dnnl::engine& eng) {
      if (!train_p) {
        const auto& pd = training_pd(eng);
        train_p = c.build<dnnl::batch_normalization_forward>(pd);
      }
      trained = true;
      return *train_p;
    }

    dnnl::primitive& infer(Cache& c, const dnnl::engine& eng) {
      if (!infer_p) {
        using bf = dnnl::batch_normalization_forward;
        bf::primitive_desc pd(bf::desc(dnnl::prop_kind::forward_inference, data, eps,
                                       scale_shift() | dnnl::normalization_flags::use_global_stats),
                              eng);
        infer_p = c.build<bf>(pd);
      }
      return *infer_p;
    }

    dnnl::primitive& backward(Cache& c, const dnnl::engine& eng) {
      if (!bwd_p) {
        using bb = dnnl::batch_normalization_backward;
        bb::primitive_desc pd(bb::desc(dnnl::prop_kind::backward, data, data, eps, scale_shift()), eng,
                              training_pd(eng));
        bwd_p = c.build<bb>(pd);
      }
      return *bwd_p;
    }
  };

  State& state(Dev& dev, const ChannelGeom& g, double eps, bool relu) {
    return cache_.get(dev.engine, Key{g.key(), eps, relu}, [&] { return State(g, eps, relu, dev.engine); });
  }

  Cache cache_;
};

}  // namespace ops
}  // namespace cifarnet
