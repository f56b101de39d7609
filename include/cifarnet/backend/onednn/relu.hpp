// cifarnet/backend/onednn/relu.hpp — rectified linear unit on oneDNN
// (float): eltwise_forward / eltwise_backward with
// eltwise_relu_use_dst_for_bwd, so backward needs only the output y and dy
// (the input may already be overwritten: forward works in place, x == y, and
// backward in place, dy == dx). Tensors are flat vectors of n elements
// (tag a); primitives are cached per n. dx is overwritten.
#pragma once

#include <optional>

#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

/// ReLU with oneDNN primitives cached per element count (float).
template <>
struct Relu<backend::OneDnn, float> {
  using Dev = Device<backend::OneDnn>;

  /// y = max(x, 0); x == y allowed.
  void forward(Dev& dev, std::size_t n, const float* x, float* y) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Relu forward";
    check(n, op);
    on::require(op, {{x, "x"}, {y, "y"}});
    on::guarded(op, [&] {
      State& s = state(dev, n);
      s.forward(cache_, dev.engine)
          .execute(dev.stream, {{DNNL_ARG_SRC, on::bind(s.a, x)}, {DNNL_ARG_DST, on::bind(s.b, y)}});
      dev.stream.wait();
    });
  }

  /// dx = dy where y > 0, else 0; dy == dx allowed.
  void backward(Dev& dev, std::size_t n, const float* y, const float* dy, float* dx) {
    namespace on = backend::onednn;
    static constexpr const char* op = "Relu backward";
    check(n, op);
    on::require(op, {{y, "y"}, {dy, "dy"}, {dx, "dx"}});
    on::guarded(op, [&] {
      State& s = state(dev, n);
      s.backward(cache_, dev.engine)
          .execute(dev.stream, {{DNNL_ARG_DST, on::bind(s.a, y)},
                                {DNNL_ARG_DIFF_DST, on::bind(s.b, dy)},
                                {DNNL_ARG_DIFF_SRC, on::bind(s.c, dx)}});
      dev.stream.wait();
    });
  }

  /// Element counts whose primitives are cached now.
  std::size_t cached_geometries() const { return cache_.size(); }
  /// Primitives built so far.
  std::size_t primitive_builds() const { return cache_.builds(); }

 private:
  struct State;
  using Cache = backend::onednn::PrimitiveCache<std::size_t, State>;
  static constexpr dnnl::algorithm alg = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;

  struct State {
    dnnl::memory::desc data;
    dnnl::memory a, b, c;  // caller buffers, re-pointed per call
    std::optional<dnnl::eltwise_forward::primitive_desc> fwd_pd;
    std::optional<dnnl::primitive> fwd_p, bwd_p;

    State(std::size_t n, const dnnl::engine& eng) : data(backend::onednn::vec_desc(n)) {
      for (dnnl::memory* m : {&a, &b, &c}) *m = backend::onednn::user_memory(data, eng);
    }

    const dnnl::eltwise_forward::primitive_desc& hint(const dnnl::engine& eng) {
      using ef = dnnl::eltwise_forward;
      if (!fwd_pd)
        fwd_pd = ef::primitive_desc(ef::desc(dnnl::prop_kind::forward_training, alg, data, 0.f, 0.f), eng);
      return *fwd_pd;
    }
    dnnl::primitive& forward(Cache& cache, const dnnl::engine& eng) {
      if (!fwd_p) fwd_p = cache.build<dnnl::eltwise_forward>(hint(eng));
      return *fwd_p;
    }
    dnnl::primitive& backward(Cache& cache, const dnnl::engine& eng) {
      using eb = dnnl::eltwise_backward;
      if (!bwd_p)
        bwd_p = cache.build<eb>(eb::primitive_desc(eb::desc(alg, data, data, 0.f, 0.f), eng, hint(eng)));
      return *bwd_p;
    }
  };

  static void check(std::size_t n, const char* op) {
    if (n == 0) throw ShapeError(detail::concat(op, ": empty tensor (n = 0)"));
  }

  State& state(Dev& dev, std::size_t n) {
    return cache_.get(dev.engine, n, [&] { return State(n, dev.engine); });
  }

  Cache cache_;
};

}  // namespace ops
}  // namespace cifarnet
