// cifarnet/optim/layout.hpp — the part of the parameter arena an optimizer,
// transform or EMA works on, and the flat parallel loops over it.
//
// A Layout records, at construction, the selected parameters of one arena
// buffer (trainable values/gradients, or the non-trainable state) by name,
// shape, offset and size, and the buffer's padded length. Slot buffers are
// arena-shaped (same offsets), so one flat pass updates every parameter.
// When every trainable parameter is selected the pass covers the whole padded
// buffer (padding is zero and stays zero under every update here); otherwise
// it covers exactly the selected parameters' elements, as ArenaRuns
// (core/arena.hpp): fixed chunks that the backend's arena kernels
// (ops::Arena, reached through kernels(params)) run; no element loop is
// here.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "cifarnet/backend/reference/arena.hpp"
#include "cifarnet/core/arena.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/optim/select.hpp"

namespace cifarnet::optim::detail {

/// The flat-arena kernels of the backend `p` lives on (the reference
/// backend's host kernels for an arena no Model owns).
template <class T>
ArenaKernels<T>& kernels(const Parameters<T>& p) {
  return p.kernels() ? *p.kernels() : default_arena_kernels<T>();
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

  /// The selected elements as chunks, for the arena kernels.
  const ArenaRuns& runs() const { return runs_; }
  /// Entry k's elements as chunks (built once, with the layout).
  const ArenaRuns& entry_runs(std::size_t k) const { return entry_runs_[k]; }

 private:
  template <class T>
  void fill(const Parameters<T>& p, const std::vector<std::size_t>& ids) {
    for (auto id : ids) {
      const auto& info = p.info(id);
      entries_.push_back(Entry{info.name, info.shape, id, info.offset, info.size});
      entry_runs_.push_back(ArenaRuns::span(info.offset, info.offset + info.size));
    }
    std::vector<ArenaChunk> spans;
    if (all_ && buffer_ == Buffer::Trainable) {
      if (buffer_size_) spans.push_back({0, buffer_size_});
    } else {
      std::vector<ArenaChunk> sorted;
      for (const auto& e : entries_)
        if (e.size) sorted.push_back({e.offset, e.offset + e.size});
      std::sort(sorted.begin(), sorted.end(),
                [](const ArenaChunk& a, const ArenaChunk& b) { return a.begin < b.begin; });
      for (const auto& s : sorted) {
        if (!spans.empty() && spans.back().end == s.begin)
          spans.back().end = s.end;
        else
          spans.push_back(s);
      }
    }
    for (const auto& s : spans) runs_.add_span(s.begin, s.end);
  }

  Buffer buffer_ = Buffer::Trainable;
  std::vector<Entry> entries_;
  ArenaRuns runs_;
  std::vector<ArenaRuns> entry_runs_;  // parallel to entries_
  std::size_t buffer_size_ = 0, count_ = 0;
  bool all_ = true;
};

}  // namespace cifarnet::optim::detail
