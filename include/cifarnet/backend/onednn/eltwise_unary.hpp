// cifarnet/backend/onednn/eltwise_unary.hpp — the machinery shared by the
// element-wise activations on oneDNN (float): eltwise_forward /
// eltwise_backward primitives of one algorithm over flat vectors of n
// elements (tag a), cached per n. The backward primitive reads either the
// forward's output (algorithms "..._use_dst_for_bwd": ReLU) or its input
// (GELU), named by `BwdArg` (DNNL_ARG_DST or DNNL_ARG_SRC). dx is
// overwritten; in place is allowed (x == y forward, dy == dx backward).
#pragma once

#include <optional>

#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet::backend::onednn {

template <dnnl::algorithm Alg, int BwdArg>
class EltwiseUnary {
 public:
  using Dev = Device<backend::OneDnn>;

  /// y = f(x); `op` names the operation in errors.
  CIFARNET_OUTLINE void run_forward(Dev& dev, std::size_t n, const float* x, float* y, const char* op) {
    check(n, op);
    require(op, {{x, "x"}, {y, "y"}});
    guarded(op, [&] {
      State& s = state(dev, n);
      s.forward(cache_, dev.engine)
          .execute(dev.stream, {{DNNL_ARG_SRC, bind(s.a, x)}, {DNNL_ARG_DST, bind(s.b, y)}});
      dev.stream.wait();
    });
  }

  /// dx = dy · f'(.) from `t`, the forward's output or input (BwdArg).
  CIFARNET_OUTLINE void run_backward(Dev& dev, std::size_t n, const float* t, const float* dy, float* dx,
                                     const char* op, const char* t_name) {
    check(n, op);
    require(op, {{t, t_name}, {dy, "dy"}, {dx, "dx"}});
    guarded(op, [&] {
      State& s = state(dev, n);
      s.backward(cache_, dev.engine)
          .execute(dev.stream, {{BwdArg, bind(s.a, t)},
                                {DNNL_ARG_DIFF_DST, bind(s.b, dy)},
                                {DNNL_ARG_DIFF_SRC, bind(s.c, dx)}});
      dev.stream.wait();
    });
  }

  /// Element counts whose primitives are cached now.
  CIFARNET_OUTLINE std::size_t cached_geometries() const { return cache_.size(); }
  /// Primitives built so far.
  CIFARNET_OUTLINE std::size_t primitive_builds() const { return cache_.builds(); }

 private:
  struct State;
  using Cache = PrimitiveCache<std::size_t, State>;

  struct State {
    dnnl::memory::desc data;
    dnnl::memory a, b, c;  // caller buffers, re-pointed per call
    std::optional<dnnl::eltwise_forward::primitive_desc> fwd_pd;
    std::optional<dnnl::primitive> fwd_p, bwd_p;

    CIFARNET_OUTLINE State(std::size_t n, const dnnl::engine& eng) : data(vec_desc(n)) {
      for (dnnl::memory* m : {&a, &b, &c}) *m = user_memory(data, eng);
    }

    CIFARNET_OUTLINE const dnnl::eltwise_forward::primitive_desc& hint(const dnnl::engine& eng) {
      using ef = dnnl::eltwise_forward;
      if (!fwd_pd)
        fwd_pd = ef::primitive_desc(ef::desc(dnnl::prop_kind::forward_training, Alg, data, 0.f, 0.f), eng);
      return *fwd_pd;
    }
    CIFARNET_OUTLINE dnnl::primitive& forward(Cache& cache, const dnnl::engine& eng) {
      if (!fwd_p) fwd_p = cache.template build<dnnl::eltwise_forward>(hint(eng));
      return *fwd_p;
    }
    CIFARNET_OUTLINE dnnl::primitive& backward(Cache& cache, const dnnl::engine& eng) {
      using eb = dnnl::eltwise_backward;
      if (!bwd_p)
        bwd_p =
            cache.template build<eb>(eb::primitive_desc(eb::desc(Alg, data, data, 0.f, 0.f), eng, hint(eng)));
      return *bwd_p;
    }
  };

  CIFARNET_OUTLINE static void check(std::size_t n, const char* op) {
    if (n == 0) throw ShapeError(cifarnet::detail::concat(op, ": empty tensor (n = 0)"));
  }

  CIFARNET_OUTLINE State& state(Dev& dev, std::size_t n) {
    return cache_.get(dev.engine, n, [&] { return State(n, dev.engine); });
  }

  Cache cache_;
};

}  // namespace cifarnet::backend::onednn
