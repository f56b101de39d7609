// cifarnet/core/arena.hpp — flat passes over the parameter arena: which
// elements a pass covers (ArenaRuns) and the kernels that run it
// (ArenaKernels, one implementation per backend: ops::Arena).
//
// Optimizers, gradient transforms, weight decay, EMA and the Trainer's
// numerics check are flat passes over the arena's contiguous buffers
// (core/params.hpp). ArenaRuns cuts the covered elements into fixed chunks of
// kArenaChunk elements starting at each span's first element: the CPU
// kernels run the chunks in parallel with OpenMP and add reductions' per-
// chunk partial sums in chunk order, so no result depends on the thread
// count. ArenaKernels is the type-erased face of a backend's ops::Arena
// (one virtual call per pass, not per element): a Model installs its
// backend's into its Parameters, and optim/ runs every pass through it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "cifarnet/core/pending.hpp"

namespace cifarnet {

/// Elements per chunk of a flat pass (a multiple of every SIMD width and of
/// Adam's 256-element blocks).
inline constexpr std::size_t kArenaChunk = std::size_t(1) << 14;
/// Below this many elements a CPU pass runs on the calling thread only.
inline constexpr std::size_t kArenaParallelMin = std::size_t(1) << 16;

/// Elements [begin, end) of an arena buffer.
struct ArenaChunk {
  std::size_t begin = 0, end = 0;
};

/// The chunks of one flat pass, in order.
struct ArenaRuns {
  std::vector<ArenaChunk> chunks;
  std::size_t elements = 0;

  /// Appends [begin, end) cut into chunks from `begin` on.
  void add_span(std::size_t begin, std::size_t end) {
    if (end <= begin) return;
    elements += end - begin;
    for (std::size_t b = begin; b < end; b += kArenaChunk)
      chunks.push_back({b, std::min(end, b + kArenaChunk)});
  }
  static ArenaRuns span(std::size_t begin, std::size_t end) {
    ArenaRuns r;
    r.add_span(begin, end);
    return r;
  }
};

/// Where a pass found its first NaN or Inf.
struct NonFinite {
  bool found = false;
  std::size_t index = 0;  ///< arena index
  double value = 0;       ///< the value there (NaN, +Inf or -Inf)
};

/// The flat-arena kernels of one backend. Arithmetic is TensorFlow's,
/// expression for expression, each product and sum rounded separately (no
/// fused multiply-add): see ops/ops.hpp, family Arena.
template <class T>
class ArenaKernels {
 public:
  virtual ~ArenaKernels() = default;
  /// var -= g·lr (GradientDescent).
  virtual void sgd(const ArenaRuns& r, T* var, const T* g, T lr) = 0;
  /// acc = acc·m + g; var -= acc·lr, or with Nesterov var -= g·lr + acc·m·lr.
  virtual void momentum(const ArenaRuns& r, T* var, T* acc, const T* g, T lr, T m, bool nesterov) = 0;
  /// m += (g − m)·omb1; v += (g² − v)·omb2; var -= (m·alpha) / (√v + eps).
  virtual void adam(const ArenaRuns& r, T* var, T* m, T* v, const T* g, T alpha, T omb1, T omb2, T eps) = 0;
  /// shadow -= (shadow − value)·omd (an exponential moving average).
  virtual void ema(const ArenaRuns& r, T* shadow, const T* value, T omd) = 0;
  /// x = x·s.
  virtual void scale(const ArenaRuns& r, T* x, T s) = 0;
  /// x = (x·a) / b (TF's clip_by_norm: t * clip / max(norm, clip)).
  virtual void scale_div(const ArenaRuns& r, T* x, T a, T b) = 0;
  /// x = value.
  virtual void fill(const ArenaRuns& r, T* x, T value) = 0;
  /// dst = src.
  virtual void copy(const ArenaRuns& r, const T* src, T* dst) = 0;
  /// a <-> b.
  virtual void swap(const ArenaRuns& r, T* a, T* b) = 0;
  /// Σ x² in double: eight interleaved accumulators per chunk, chunks added in order.
  virtual double sum_squares(const ArenaRuns& r, const T* x) = 0;
  /// Whether every element is finite.
  virtual bool all_finite(const ArenaRuns& r, const T* x) = 0;
  /// The first NaN or Inf, in arena order.
  virtual NonFinite find_non_finite(const ArenaRuns& r, const T* x) = 0;
  /// L2 weight decay of one parameter: g += T(wd)·v (rounded, then added);
  /// returns Σ v² summed in double element by element, in order.
  virtual double weight_decay(std::size_t begin, std::size_t end, T* g, const T* v, T wd) = 0;

  /// weight_decay over each [begin, end) of `ranges`; returns the sum of
  /// their Σ v² (added in range order: the same bits as adding the calls'
  /// results). A backend on a device reads its sums back once.
  virtual double weight_decay_ranges(const std::vector<std::pair<std::size_t, std::size_t>>& ranges, T* g,
                                     const T* v, T wd) {
    double s = 0;
    for (const auto& r : ranges) s += weight_decay(r.first, r.second, g, v, wd);
    return s;
  }

  /// sum_squares as a Pending (core/pending.hpp): a backend on a device
  /// leaves it there until it is read, with the step's other values.
  virtual Pending sum_squares_deferred(const ArenaRuns& r, const T* x) {
    return Pending::ready(sum_squares(r, x));
  }
  /// A Pending whose value is finite exactly when every element is (the
  /// numerics check's; its value means nothing else).
  virtual Pending finite_deferred(const ArenaRuns& r, const T* x) {
    return Pending::ready(all_finite(r, x) ? 0.0 : std::numeric_limits<double>::quiet_NaN());
  }
  /// weight_decay_ranges as a Pending of finish(Σ v², nullptr, args) (Σ v²
  /// when finish is null).
  virtual Pending weight_decay_ranges_deferred(const std::vector<std::pair<std::size_t, std::size_t>>& ranges,
                                               T* g, const T* v, T wd, PendingFinish finish,
                                               const PendingArgs& args) {
    const double s = weight_decay_ranges(ranges, g, v, wd);
    return Pending::ready(finish ? finish(s, nullptr, args) : s);
  }

  /// An optimizer's (or EMA's) arena-shaped state [p, p + n) in host memory,
  /// offered to the backend: one that keeps the arena on its device (the
  /// CUDA backend with Model::set_device_resident) keeps this buffer there
  /// too, with p's host copy synchronised lazily like the arena's (current
  /// after Model::sync_parameters_to_host / Trainer::state_dict). The
  /// returned handle gives it back (host copy current) when the last copy
  /// goes: the owner keeps it while p lives. Null: p stays host memory.
  virtual std::shared_ptr<void> adopt_state(T* p, std::size_t n) {
    (void)p;
    (void)n;
    return nullptr;
  }
};

}  // namespace cifarnet
