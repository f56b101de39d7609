// cifarnet/backend/onednn/lrn.hpp — local response normalization across
// channels for the oneDNN backend (float), in TensorFlow's form
// y_c = x_c / (bias + alpha * sum_{|j-c| <= r} x_j^2)^beta.
//
// The op runs the project's own loops (onednn/lrn_kernels.hpp), not oneDNN's
// primitive: oneDNN 2.6 has JIT kernels for a window of 5 channels only, and
// even there its backward is the reference implementation. On a 2-core AVX2
// EPYC at batch 32 (64 channels, 12x12, one thread; probe in
// docs/runs/bench/2026-12-03-lrn-kernels/): the tutorial's window of 9,
// oneDNN 6.2-6.9 ms forward and 46-49 ms backward, these loops 0.47-0.57 ms
// and 0.76-0.89 ms; a window of 5 in NCHW is the one case where oneDNN's JIT
// forward is faster (0.18 against 0.43 ms), its backward still 26 ms. The
// tutorial CNN trains 2.6-3.0x faster for it (same docs/runs directory).
// The backward recomputes the normalizer from x (no workspace, no state
// between the passes); y and dx may alias x or dy.
#pragma once

#include <omp.h>

#include <algorithm>
#include <vector>

#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/backend/onednn/lrn_kernels.hpp"
#include "cifarnet/ops/ops.hpp"

namespace cifarnet {
namespace ops {

/// LRN in the own loops of onednn/lrn_kernels.hpp (float).
template <class T>
struct Lrn<backend::OneDnn, T> {
  CIFARNET_ONEDNN_FLOAT_ONLY(Lrn, T);
  using Dev = Device<backend::OneDnn>;

  /// y = lrn(x).
  CIFARNET_OUTLINE void forward(Dev&, const ChannelGeom& g, const LrnParams& p, bool /*training*/,
                                const float* x, float* y) {
    static constexpr const char* op = "Lrn forward";
    check(g, p, op);
    backend::onednn::require(op, {{x, "x"}, {y, "y"}});
    const int threads = this->threads();
    backend::onednn::lrn::forward(g, p, x, y, scratch(g, p, threads), threads);
  }

  /// dx from x and dy.
  CIFARNET_OUTLINE void backward(Dev&, const ChannelGeom& g, const LrnParams& p, const float* x,
                                 const float* /*y*/, const float* dy, float* dx) {
    static constexpr const char* op = "Lrn backward";
    check(g, p, op);
    backend::onednn::require(op, {{x, "x"}, {dy, "dy"}, {dx, "dx"}});
    const int threads = this->threads();
    backend::onednn::lrn::backward(g, p, x, dy, dx, scratch(g, p, threads), threads);
  }

 private:
  CIFARNET_OUTLINE static void check(const ChannelGeom& g, const LrnParams& p, const char* op) {
    backend::onednn::check_geometry(g, op);
    if (!(p.bias > 0.0) || !(p.alpha >= 0.0) || !(p.beta >= 0.0))
      throw ConfigError(detail::concat(op, ": LRN needs bias > 0, alpha >= 0 and beta >= 0 (got bias=",
                                       p.bias, ", alpha=", p.alpha, ", beta=", p.beta, ")"));
  }

  static int threads() { return std::max(1, omp_get_max_threads()); }

  /// Every thread's scratch, grown (never shrunk) to what g needs.
  CIFARNET_OUTLINE float* scratch(const ChannelGeom& g, const LrnParams& p, int threads) {
    const std::size_t need = std::size_t(threads) * backend::onednn::lrn::scratch_floats(g, p.depth_radius);
    if (scratch_.size() < need) scratch_.resize(need);
    return scratch_.data();
  }

  std::vector<float> scratch_;
};

}  // namespace ops
}  // namespace cifarnet
