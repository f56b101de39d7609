// cifarnet/layers/sync_batch_norm.hpp — the arithmetic of synchronized batch
// norm: batch statistics over the global batch of a data-parallel run.
//
// BatchNorm2d calls these when its RunContext carries a CrossReplicaSum
// (nn/context.hpp); the reducer (distributed::SyncBatchNorm over MPI) sums
// per-channel values over all replicas. Forward: local per-channel sums of x
// and x² and the element count, summed across replicas, give the global mean
// and biased variance (accumulated in double); the layer then normalizes with
// them through the backend's inference op. Backward: the two per-channel
// reductions Σdy and Σdy·x̂ are summed across replicas, and
// dx = γ/σ · (dy − Σdy/M − x̂·Σdy·x̂/M) with M the global count. dγ and dβ are
// the local sums (each replica's share; the gradient all-reduce adds them).
// With one replica every result equals plain batch norm's up to rounding.
// Works in NCHW and NHWC; pure loops, no backend primitive.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "cifarnet/nn/context.hpp"
#include "cifarnet/ops/geometry.hpp"

namespace cifarnet::detail {

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
/// global element count per channel M (Σ n·h·w). Collective.
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

/// dx from the global reductions, dgamma/dbeta from the local ones. Collective.
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

}  // namespace cifarnet::detail
