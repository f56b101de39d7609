// cifarnet/backend/host/arena.hpp — the flat-arena kernels on the CPU
// (ops::Arena of the reference and oneDNN backends, and the default of a
// Parameters that no Model owns): OpenMP over the chunks of an ArenaRuns,
// Eigen array expressions inside a chunk. Update kernels are
// CIFARNET_NO_FP_CONTRACT: TensorFlow's CPU kernels round every product and
// sum separately, and fusing them into FMAs (GCC's default with
// -march=native in GNU mode) would move results by an ulp. Reductions add
// per-chunk partial sums in chunk order: the same result for any number of
// threads. oneDNN has no optimizer primitives; these loops are memory-bound
// and already vectorized.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#if defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#endif

#include "cifarnet/core/compiled.hpp"
#include "cifarnet/core/arena.hpp"
#include "cifarnet/core/fp_contract.hpp"

namespace cifarnet::backend::host {

/// out[i] = sqrt(x[i]), correctly rounded. (Eigen 3.4's vectorized float
/// sqrt under EIGEN_FAST_MATH is an approximation that also flushes
/// denormals to zero; Adam needs the exact one, as TF computes.)
inline void exact_sqrt(const float* x, float* out, std::size_t n) {
  std::size_t i = 0;
#if defined(__AVX__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#elif defined(__SSE2__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(out + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) out[i] = std::sqrt(x[i]);
}
inline void exact_sqrt(const double* x, double* out, std::size_t n) {
  std::size_t i = 0;
#if defined(__AVX__)
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(out + i, _mm256_sqrt_pd(_mm256_loadu_pd(x + i)));
#elif defined(__SSE2__)
  for (; i + 2 <= n; i += 2) _mm_storeu_pd(out + i, _mm_sqrt_pd(_mm_loadu_pd(x + i)));
#endif
  for (; i < n; ++i) out[i] = std::sqrt(x[i]);
}
template <class T>
void exact_sqrt(const T* x, T* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = std::sqrt(x[i]);
}

/// Sum of squares of g[b, e) in double with eight interleaved accumulators
/// (vectorizable; the order depends only on b and e, not on alignment).
template <class T>
double sum_squares(const T* g, std::size_t b, std::size_t e) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::size_t i = b;
  for (; i + 8 <= e; i += 8)
    for (int k = 0; k < 8; ++k) {
      const double x = double(g[i + std::size_t(k)]);
      acc[k] += x * x;
    }
  for (int k = 0; i < e; ++i, ++k) acc[k] += double(g[i]) * double(g[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/// Whether g[b, e) holds only finite values: x - x is 0 for a finite x and
/// NaN for NaN or Inf, so the sum stays 0 exactly when all are finite (in any
/// order, hence a SIMD reduction with no early exit).
template <class T>
bool all_finite(const T* g, std::size_t b, std::size_t e) {
  T acc = 0;
#pragma omp simd reduction(+ : acc)
  for (std::size_t i = b; i < e; ++i) acc += g[i] - g[i];
  return acc == T(0);
}

/// f(begin, end) over every chunk, in parallel when the pass is large.
template <class F>
void for_chunks(const ArenaRuns& r, F&& f) {
  const long n = long(r.chunks.size());
#pragma omp parallel for schedule(static) if (r.elements >= kArenaParallelMin)
  for (long c = 0; c < n; ++c) f(r.chunks[std::size_t(c)].begin, r.chunks[std::size_t(c)].end);
}

/// Σ f(begin, end) over the chunks, added in chunk order.
template <class F>
double sum_chunks(const ArenaRuns& r, F&& f) {
  const long n = long(r.chunks.size());
  thread_local std::vector<double> part;  // the caller's; keeps its capacity (no allocation per step)
  part.assign(r.chunks.size(), 0.0);
  double* out = part.data();  // inside the region `part` would name each worker's own
#pragma omp parallel for schedule(static) if (r.elements >= kArenaParallelMin)
  for (long c = 0; c < n; ++c) out[c] = f(r.chunks[std::size_t(c)].begin, r.chunks[std::size_t(c)].end);
  double s = 0;
  for (double v : part) s += v;
  return s;
}

/// ops::Arena on host memory (any device type: the arguments are host arrays).
template <class T>
struct ArenaOp {
  using Arr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
  using CArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

  template <class Dev>
  void sgd(Dev&, const ArenaRuns& r, T* var, const T* g, T lr) {
    for_chunks(r, [&](std::size_t b, std::size_t e) { sgd_kernel(var + b, g + b, Eigen::Index(e - b), lr); });
  }
  template <class Dev>
  void momentum(Dev&, const ArenaRuns& r, T* var, T* acc, const T* g, T lr, T m, bool nesterov) {
    for_chunks(r, [&](std::size_t b, std::size_t e) {
      momentum_kernel(var + b, acc + b, g + b, Eigen::Index(e - b), lr, m, nesterov);
    });
  }
  template <class Dev>
  void adam(Dev&, const ArenaRuns& r, T* var, T* m, T* v, const T* g, T alpha, T omb1, T omb2, T eps) {
    for_chunks(r, [&](std::size_t b, std::size_t e) {
      adam_kernel(var + b, m + b, v + b, g + b, Eigen::Index(e - b), alpha, omb1, omb2, eps);
    });
  }
  template <class Dev>
  void ema(Dev&, const ArenaRuns& r, T* shadow, const T* value, T omd) {
    for_chunks(r, [&](std::size_t b, std::size_t e) {
      ema_kernel(shadow + b, value + b, Eigen::Index(e - b), omd);
    });
  }
  template <class Dev>
  void scale(Dev&, const ArenaRuns& r, T* x, T s) {
    for_chunks(r, [&](std::size_t b, std::size_t e) { Arr(x + b, Eigen::Index(e - b)) *= s; });
  }
  template <class Dev>
  void scale_div(Dev&, const ArenaRuns& r, T* x, T a, T d) {
    for_chunks(r, [&](std::size_t b, std::size_t e) {
      Arr v(x + b, Eigen::Index(e - b));
      v = (v * a) / d;
    });
  }
  template <class Dev>
  void fill(Dev&, const ArenaRuns& r, T* x, T value) {
    for_chunks(r, [&](std::size_t b, std::size_t e) { std::fill(x + b, x + e, value); });
  }
  template <class Dev>
  void copy(Dev&, const ArenaRuns& r, const T* src, T* dst) {
    for_chunks(r, [&](std::size_t b, std::size_t e) { std::copy(src + b, src + e, dst + b); });
  }
  template <class Dev>
  void swap(Dev&, const ArenaRuns& r, T* a, T* b) {
    for_chunks(r, [&](std::size_t x, std::size_t y) { std::swap_ranges(a + x, a + y, b + x); });
  }
  template <class Dev>
  double sum_squares(Dev&, const ArenaRuns& r, const T* x) {
    return sum_chunks(r, [&](std::size_t b, std::size_t e) { return host::sum_squares(x, b, e); });
  }
  template <class Dev>
  bool all_finite(Dev&, const ArenaRuns& r, const T* x) {
    return sum_chunks(
               r, [&](std::size_t b, std::size_t e) { return host::all_finite(x, b, e) ? 0.0 : 1.0; }) == 0;
  }
  template <class Dev>
  NonFinite find_non_finite(Dev&, const ArenaRuns& r, const T* x) {
    for (const auto& c : r.chunks)
      for (std::size_t i = c.begin; i < c.end; ++i)
        if (!std::isfinite(double(x[i]))) return {true, i, double(x[i])};
    return {};
  }
  /// weight_decay over each of `ranges`, the ranges shared among the
  /// threads (each computed whole by one thread, as weight_decay computes
  /// it) and their sums added in range order: the same bits as the serial
  /// loop of ArenaKernels::weight_decay_ranges. One thread runs them all
  /// where the ranges are not ascending and disjoint, or hold too few
  /// elements to share. It was the one serial pass of the optimizer step: momentum SGD
  /// with weight decay took 1.20 -> 0.82 ms a ResNet-56 step, 0.38 -> 0.27
  /// ms a ResNet-20 step, on two threads (docs/BENCHMARKS.md, 2026-12-05
  /// 06:36).
  template <class Dev>
  double weight_decay_ranges(Dev& dev, const std::vector<std::pair<std::size_t, std::size_t>>& ranges, T* g,
                             const T* v, T wd) {
    std::size_t total = 0;
    bool disjoint = true;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      total += ranges[i].second > ranges[i].first ? ranges[i].second - ranges[i].first : 0;
      if (i > 0 && ranges[i].first < ranges[i - 1].second) disjoint = false;
    }
    thread_local std::vector<double> part;  // the caller's; keeps its capacity
    part.assign(ranges.size(), 0.0);
    double* out = part.data();
    const long n = long(ranges.size());
#pragma omp parallel for schedule(dynamic, 1) if (disjoint && total >= kArenaParallelMin)
    for (long i = 0; i < n; ++i) {
      const auto& r = ranges[std::size_t(i)];
      out[i] = weight_decay(dev, r.first, r.second, g, v, wd);
    }
    double s = 0;
    for (double p : part) s += p;
    return s;
  }
  template <class Dev>
  CIFARNET_NO_FP_CONTRACT double weight_decay(Dev&, std::size_t begin, std::size_t end, T* g, const T* v,
                                              T wd) {
    CIFARNET_NO_FP_CONTRACT_BODY
    // Σv² in double over 8 interleaved partial sums (element i into sum i %
    // 8, the partials added in order at the end): one chain of dependent
    // double adds waited on each add's latency, 8 independent ones
    // vectorize (ResNet-20's optimizer step 0.70 -> 0.39 ms with momentum;
    // docs/BENCHMARKS.md, 2026-11-27 14:53). Each v² is exact in double,
    // so only the order of the double sum changed.
    constexpr std::size_t kLanes = 8;
    double part[kLanes] = {};
    std::size_t i = begin;
    for (; i + kLanes <= end; i += kLanes)
      for (std::size_t l = 0; l < kLanes; ++l) part[l] += double(v[i + l]) * double(v[i + l]);
    double s = 0;
    for (std::size_t l = 0; l < kLanes; ++l) s += part[l];
    for (; i < end; ++i) s += double(v[i]) * double(v[i]);
    for (std::size_t j = begin; j < end; ++j) g[j] += wd * v[j];
    return s;
  }

 private:
  CIFARNET_NO_FP_CONTRACT CIFARNET_OUTLINE static void sgd_kernel(T* var, const T* g, Eigen::Index n, T a) {
    CIFARNET_NO_FP_CONTRACT_BODY
    Arr(var, n) -= CArr(g, n) * a;
  }
  // TF ApplyMomentum, expression for expression.
  CIFARNET_NO_FP_CONTRACT CIFARNET_OUTLINE static void momentum_kernel(T* var, T* acc, const T* g,
                                                                       Eigen::Index n, T a, T m,
                                                                       bool nesterov) {
    CIFARNET_NO_FP_CONTRACT_BODY
    Arr v(var, n), ac(acc, n);
    CArr gr(g, n);
    ac = ac * m + gr;
    if (nesterov)
      v -= gr * a + ac * m * a;
    else
      v -= ac * a;
  }
  // TF ApplyAdam, expression for expression; sqrt exact (see exact_sqrt).
  CIFARNET_NO_FP_CONTRACT CIFARNET_OUTLINE static void adam_kernel(T* var, T* mp, T* vp, const T* g,
                                                                   Eigen::Index n, T alpha, T omb1, T omb2,
                                                                   T eps) {
    CIFARNET_NO_FP_CONTRACT_BODY
    Arr w(var, n), m(mp, n), v(vp, n);
    CArr gr(g, n);
    m += (gr - m) * omb1;
    v += (gr.square() - v) * omb2;
    constexpr Eigen::Index kBlock = 256;
    alignas(64) T root[kBlock];
    for (Eigen::Index i = 0; i < n; i += kBlock) {
      const Eigen::Index k = std::min(kBlock, n - i);
      exact_sqrt(vp + i, root, std::size_t(k));
      w.segment(i, k) -= (m.segment(i, k) * alpha) / (Arr(root, k) + eps);
    }
  }
  // TF assign_moving_average: shadow -= (shadow - value) * (1 - decay).
  CIFARNET_NO_FP_CONTRACT CIFARNET_OUTLINE static void ema_kernel(T* shadow, const T* value, Eigen::Index n,
                                                                  T omd) {
    CIFARNET_NO_FP_CONTRACT_BODY
    Arr s(shadow, n);
    s -= (s - CArr(value, n)) * omd;
  }
};

}  // namespace cifarnet::backend::host
