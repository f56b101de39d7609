// cifarnet/backend/host/bn_stats.hpp — batch norm's per-channel bookkeeping
// as host loops shared by the CPU backends: the moving-statistics update, the
// conv+BN fold for inference, and synchronized batch norm's statistics and
// backward over every data-parallel replica (through a CrossReplicaSum).
// Every per-channel quantity is computed in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "cifarnet/core/cross_replica.hpp"
#include "cifarnet/ops/geometry.hpp"

namespace cifarnet::backend::host {

/// moving = decay·moving + (1 − decay)·batch, the variance's batch value
/// scaled by `bessel` (m / (m − 1): TF's fused batch norm feeds the moving
/// variance the unbiased estimate).
template <class T>
void bn_update_moving(std::size_t c, double decay, double bessel, const T* mean, const T* var, T* mmean,
                      T* mvar) {
  for (std::size_t i = 0; i < c; ++i) {
    mmean[i] = T(decay * double(mmean[i]) + (1 - decay) * double(mean[i]));
    mvar[i] = T(decay * double(mvar[i]) + (1 - decay) * double(var[i]) * bessel);
  }
}

/// Folds batch norm into the convolution before it: s = γ/√(var+ε),
/// w'[r, o] = w[r, o]·s[o] (weights with `c` output channels innermost: HWIO),
/// b'[o] = β[o] − mean[o]·s[o]. `rows` is the weights' size / c.
template <class T>
void bn_fold(std::size_t rows, std::size_t c, double eps, const T* w, const T* gamma, const T* beta,
             const T* mean, const T* var, T* folded_w, T* folded_b, std::vector<T>& scale) {
  scale.resize(c);
  for (std::size_t o = 0; o < c; ++o) {
    const double sc = double(gamma[o]) / std::sqrt(double(var[o]) + eps);
    scale[o] = T(sc);
    folded_b[o] = T(double(beta[o]) - double(mean[o]) * sc);
  }
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < c; ++o) folded_w[r * c + o] = w[r * c + o] * scale[o];
}

/// Calls f(i, c) for every element index i of channel c, in memory order.
template <class F>
void for_each_channel_element(const ChannelGeom& g, F&& f) {
  if (g.fmt == DataFormat::NHWC) {
    const std::size_t pos = g.n * g.h * g.w;
    for (std::size_t p = 0; p < pos; ++p)
      for (std::size_t c = 0; c < g.c; ++c) f(p * g.c + c, c);
  } else {
    const std::size_t plane = g.h * g.w;
    for (std::size_t n = 0; n < g.n; ++n)
      for (std::size_t c = 0; c < g.c; ++c) {
        const std::size_t base = (n * g.c + c) * plane;
        for (std::size_t q = 0; q < plane; ++q) f(base + q, c);
      }
  }
}

/// Global batch mean and biased variance of x over all replicas; returns the
/// global element count per channel M (Σ n·h·w). Local per-channel sums of x
/// and x² and the count are summed across replicas. Collective.
template <class T>
double sync_bn_statistics(const ChannelGeom& g, const T* x, CrossReplicaSum& reducer, T* mean, T* var,
                          std::vector<double>& scratch) {
  const std::size_t C = g.c;
  scratch.assign(2 * C + 1, 0.0);
  double* s = scratch.data();
  double* ss = scratch.data() + C;
  for_each_channel_element(g, [&](std::size_t i, std::size_t c) {
    const double v = double(x[i]);
    s[c] += v;
    ss[c] += v * v;
  });
  scratch[2 * C] = double(g.n * g.h * g.w);
  reducer.sum(scratch.data(), scratch.size());
  const double m = scratch[2 * C];
  for (std::size_t c = 0; c < C; ++c) {
    const double mu = s[c] / m;
    mean[c] = T(mu);
    var[c] = T(std::max(0.0, ss[c] / m - mu * mu));
  }
  return m;
}

/// dx from the global reductions Σdy and Σdy·x̂ (summed across replicas),
/// dx = γ/σ · (dy − Σdy/M − x̂·Σdy·x̂/M); dγ and dβ are the local sums (each
/// replica's share: the gradient all-reduce adds them). Collective.
template <class T>
void sync_bn_backward(const ChannelGeom& g, double eps, const T* x, const T* dy, const T* gamma,
                      const T* mean, const T* var, CrossReplicaSum& reducer, T* dx, T* dgamma, T* dbeta,
                      std::vector<double>& scratch) {
  const std::size_t C = g.c;
  scratch.assign(3 * C + 1, 0.0);
  double* sdy = scratch.data();
  double* sdyx = scratch.data() + C;
  double* inv = scratch.data() + 2 * C + 1;
  for (std::size_t c = 0; c < C; ++c) inv[c] = 1.0 / std::sqrt(double(var[c]) + eps);
  for_each_channel_element(g, [&](std::size_t i, std::size_t c) {
    sdy[c] += double(dy[i]);
    sdyx[c] += double(dy[i]) * (double(x[i]) - double(mean[c])) * inv[c];
  });
  for (std::size_t c = 0; c < C; ++c) {
    dgamma[c] = T(sdyx[c]);
    dbeta[c] = T(sdy[c]);
  }
  scratch[2 * C] = double(g.n * g.h * g.w);
  reducer.sum(scratch.data(), 2 * C + 1);  // Σdy, Σdy·x̂ and the count, over all replicas
  const double m = scratch[2 * C];
  for_each_channel_element(g, [&](std::size_t i, std::size_t c) {
    const double xhat = (double(x[i]) - double(mean[c])) * inv[c];
    dx[i] = T(double(gamma[c]) * inv[c] / m * (m * double(dy[i]) - sdy[c] - xhat * sdyx[c]));
  });
}

}  // namespace cifarnet::backend::host

namespace cifarnet::backend::host {

/// ops::BnStats as host loops (any device type: the arguments are host memory).
template <class T>
struct BnStatsOp {
  template <class Dev>
  void update_moving(Dev&, std::size_t c, double decay, double bessel, const T* mean, const T* var, T* mmean,
                     T* mvar) {
    bn_update_moving(c, decay, bessel, mean, var, mmean, mvar);
  }
  template <class Dev>
  void fold(Dev&, std::size_t rows, std::size_t c, double eps, const T* w, const T* gamma, const T* beta,
            const T* mean, const T* var, T* folded_w, T* folded_b) {
    bn_fold(rows, c, eps, w, gamma, beta, mean, var, folded_w, folded_b, scale_);
  }

 private:
  std::vector<T> scale_;
};

/// ops::SyncBatchNorm as host loops.
template <class T>
struct SyncBatchNormOp {
  template <class Dev>
  double statistics(Dev&, const ChannelGeom& g, const T* x, CrossReplicaSum& reducer, T* mean, T* var) {
    return sync_bn_statistics(g, x, reducer, mean, var, scratch_);
  }
  template <class Dev>
  void backward(Dev&, const ChannelGeom& g, double eps, const T* x, const T* dy, const T* gamma,
                const T* mean, const T* var, CrossReplicaSum& reducer, T* dx, T* dgamma, T* dbeta) {
    sync_bn_backward(g, eps, x, dy, gamma, mean, var, reducer, dx, dgamma, dbeta, scratch_);
  }

 private:
  std::vector<double> scratch_;  // the per-channel sums (kept: no allocation per step)
};

}  // namespace cifarnet::backend::host
