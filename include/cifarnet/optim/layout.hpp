// cifarnet/optim/layout.hpp — the part of the parameter arena an optimizer,
// transform or EMA works on, and the flat parallel loops over it.
//
// A Layout records, at construction, the selected parameters of one arena
// buffer (trainable values/gradients, or the non-trainable state) by name,
// shape, offset and size, and the buffer's padded length. Slot buffers are
// arena-shaped (same offsets), so one flat pass updates every parameter.
// When every trainable parameter is selected the pass covers the whole padded
// buffer (padding is zero and stays zero under every update here); otherwise
// it covers exactly the selected parameters' elements. Work is cut into fixed
// chunks run with OpenMP; reductions add per-chunk partial sums in chunk
// order, so results do not depend on the thread count. Update kernels are
// marked CIFARNET_NO_FP_CONTRACT: TensorFlow's CPU kernels round every
// product and sum separately, and fusing them into FMAs (GCC's default with
// -march=native in GNU mode) would move results by an ulp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#if defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#endif

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/fp_contract.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/optim/select.hpp"

namespace cifarnet::optim::detail {

/// Elements per chunk of a flat pass (a multiple of every SIMD width).
inline constexpr std::size_t kChunk = std::size_t(1) << 14;
/// Below this many elements a pass runs on the calling thread only.
inline constexpr std::size_t kParallelMin = std::size_t(1) << 16;

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

struct Span {
  std::size_t begin = 0, end = 0;
};

/// Runs f(begin, end) over [begin, end) cut into chunks, in parallel when large.
template <class F>
void parallel_span(std::size_t begin, std::size_t end, F&& f) {
  const std::size_t n = end > begin ? end - begin : 0;
  const long chunks = long((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (long c = 0; c < chunks; ++c) {
    const std::size_t b = begin + std::size_t(c) * kChunk;
    f(b, std::min(end, b + kChunk));
  }
}

/// Sum of f(begin, end) (a double) over chunks of [begin, end), added in
/// chunk order: the same result for any number of threads.
template <class F>
double parallel_span_sum(std::size_t begin, std::size_t end, F&& f) {
  const std::size_t n = end > begin ? end - begin : 0;
  const long chunks = long((n + kChunk - 1) / kChunk);
  std::vector<double> part(std::size_t(chunks), 0.0);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (long c = 0; c < chunks; ++c) {
    const std::size_t b = begin + std::size_t(c) * kChunk;
    part[std::size_t(c)] = f(b, std::min(end, b + kChunk));
  }
  double s = 0;
  for (double v : part) s += v;
  return s;
}

/// One selected parameter.
struct Entry {
  std::string name;
  std::vector<std::size_t> shape;
  std::size_t id = 0, offset = 0, size = 0;
};

/// The selected parameters of one arena buffer and the chunks covering them.
class Layout {
 public:
  enum class Buffer { Trainable, State };

  Layout() = default;

  /// The trainable parameters chosen by `sel`.
  template <class T>
  static Layout trainable(const Parameters<T>& p, const Selection& sel) {
    if (!p.allocated()) throw Error("optimizer built over a parameter arena that is not allocated yet");
    Layout l;
    l.buffer_ = Buffer::Trainable;
    l.buffer_size_ = std::size_t(p.values().size());
    l.count_ = p.count();
    l.all_ = sel.is_all();
    l.fill(p, sel.resolve(p));
    return l;
  }

  /// Every non-trainable (state) parameter.
  template <class T>
  static Layout state(const Parameters<T>& p) {
    if (!p.allocated()) throw Error("optimizer built over a parameter arena that is not allocated yet");
    Layout l;
    l.buffer_ = Buffer::State;
    l.buffer_size_ = std::size_t(p.state().size());
    l.count_ = p.count();
    l.all_ = true;
    std::vector<std::size_t> ids;
    for (std::size_t i = 0; i < p.count(); ++i)
      if (!p.info(i).trainable) ids.push_back(i);
    l.fill(p, ids);
    return l;
  }

  const std::vector<Entry>& entries() const { return entries_; }
  /// Padded length of the buffer (= slot buffer length).
  std::size_t buffer_size() const { return buffer_size_; }
  bool covers_all() const { return all_; }
  /// The entry for a parameter name, or nullptr when it is not selected.
  const Entry* find(const std::string& name) const {
    for (const auto& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }

  /// Throws ShapeError unless `p` has the layout this object was built for
  /// (same parameter count and buffer length; every selected parameter with
  /// the same name, offset and size).
  template <class T>
  void check(const Parameters<T>& p, const std::string& who) const {
    const std::size_t size = std::size_t(buffer_ == Buffer::Trainable ? p.values().size() : p.state().size());
    if (p.count() != count_ || size != buffer_size_)
      throw ShapeError(who + " was built for a parameter arena of " + std::to_string(count_) +
                       " parameters / " + std::to_string(buffer_size_) + " elements, but step got one of " +
                       std::to_string(p.count()) + " parameters / " + std::to_string(size) + " elements");
    for (const auto& e : entries_) {
      const auto& info = p.info(e.id);
      if (info.name != e.name || info.offset != e.offset || info.size != e.size)
        throw ShapeError(who + " was built for a parameter arena whose parameter " + std::to_string(e.id) +
                         " is '" + e.name + "' (" + std::to_string(e.size) + " elements), but step got '" +
                         info.name + "' (" + std::to_string(info.size) + " elements)");
    }
  }

  /// f(begin, end) over every chunk of the selected elements, in parallel.
  template <class F>
  void run(F&& f) const {
    const long n = long(chunks_.size());
#pragma omp parallel for schedule(static) if (elements_ >= kParallelMin)
    for (long c = 0; c < n; ++c) f(chunks_[std::size_t(c)].begin, chunks_[std::size_t(c)].end);
  }

  /// Sum of f(begin, end) over the chunks, in chunk order (thread-count
  /// independent).
  template <class F>
  double sum(F&& f) const {
    const long n = long(chunks_.size());
    std::vector<double> part(chunks_.size(), 0.0);
#pragma omp parallel for schedule(static) if (elements_ >= kParallelMin)
    for (long c = 0; c < n; ++c)
      part[std::size_t(c)] = f(chunks_[std::size_t(c)].begin, chunks_[std::size_t(c)].end);
    double s = 0;
    for (double v : part) s += v;
    return s;
  }

 private:
  template <class T>
  void fill(const Parameters<T>& p, const std::vector<std::size_t>& ids) {
    for (auto id : ids) {
      const auto& info = p.info(id);
      entries_.push_back(Entry{info.name, info.shape, id, info.offset, info.size});
    }
    std::vector<Span> spans;
    if (all_ && buffer_ == Buffer::Trainable) {
      if (buffer_size_) spans.push_back({0, buffer_size_});
    } else {
      std::vector<Span> sorted;
      for (const auto& e : entries_)
        if (e.size) sorted.push_back({e.offset, e.offset + e.size});
      std::sort(sorted.begin(), sorted.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
      for (const auto& s : sorted) {
        if (!spans.empty() && spans.back().end == s.begin)
          spans.back().end = s.end;
        else
          spans.push_back(s);
      }
    }
    for (const auto& s : spans) {
      elements_ += s.end - s.begin;
      for (std::size_t b = s.begin; b < s.end; b += kChunk)
        chunks_.push_back({b, std::min(s.end, b + kChunk)});
    }
  }

  Buffer buffer_ = Buffer::Trainable;
  std::vector<Entry> entries_;
  std::vector<Span> chunks_;
  std::size_t buffer_size_ = 0, count_ = 0, elements_ = 0;
  bool all_ = true;
};

}  // namespace cifarnet::optim::detail
