// cifarnet/nn/profile.hpp — optional per-layer wall-clock profile of a
// model's forward and backward passes (bench/cifarnet_bench prints it).
//
// A Profiler is attached with Model::set_profiler(&p); every leaf layer's
// forward and backward call (containers are not leaves, so nothing is
// counted twice) and every residual addition is timed and accumulated under
// the layer's full name, in the order first seen. Backends finish their work
// before an op returns, so the wall-clock time of a call is its cost.
// Without a profiler (the default) the only cost is one null check per layer.
//
// With record_events(true) it also keeps every call as an Event (start and
// duration, in seconds since record_events was turned on): the Trainer's
// trace_every_n_steps writes one step's events as a Chrome trace
// (train/trace.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cifarnet {

/// Accumulated forward/backward seconds per layer name.
class Profiler {
 public:
  struct Entry {
    std::string name;  ///< full layer name, e.g. "stage1/block0/conv1"
    std::string kind;  ///< layer kind: "conv", "bn", "relu", "add", ...
    double forward = 0, backward = 0;
    std::size_t forward_calls = 0, backward_calls = 0;
  };

  using Clock = std::chrono::steady_clock;

  /// One timed call (record_events mode).
  struct Event {
    std::string name, kind;
    bool backward = false;
    double start = 0, duration = 0;  ///< seconds since events were turned on
  };

  /// Adds `seconds` to `name`'s forward or backward total.
  void add(const std::string& name, const char* kind, bool backward, double seconds) {
    auto it = index_.find(name);
    if (it == index_.end()) {
      it = index_.emplace(name, entries_.size()).first;
      entries_.push_back(Entry{name, kind, 0, 0, 0, 0});
    }
    Entry& e = entries_[it->second];
    (backward ? e.backward : e.forward) += seconds;
    ++(backward ? e.backward_calls : e.forward_calls);
  }

  /// Books the call that ran from t0 to t1 (and keeps it as an Event when
  /// recording).
  void add(const std::string& name, const char* kind, bool backward, Clock::time_point t0,
           Clock::time_point t1) {
    add(name, kind, backward, std::chrono::duration<double>(t1 - t0).count());
    if (recording_)
      events_.push_back(Event{name, kind, backward, std::chrono::duration<double>(t0 - origin_).count(),
                              std::chrono::duration<double>(t1 - t0).count()});
  }

  /// Books one call made of parts timed apart (a layer whose work is
  /// interleaved with another's, ConvBatchNorm's ranges of images): `seconds`
  /// in all, the first part starting at t0 (one Event of that duration
  /// from t0 when recording).
  void add(const std::string& name, const char* kind, bool backward, Clock::time_point t0, double seconds) {
    add(name, kind, backward, seconds);
    if (recording_)
      events_.push_back(
          Event{name, kind, backward, std::chrono::duration<double>(t0 - origin_).count(), seconds});
  }

  /// Keeps every call from now on as an Event (times relative to now), or
  /// stops keeping them. Turning it on forgets earlier events.
  void record_events(bool on) {
    recording_ = on;
    if (on) {
      events_.clear();
      origin_ = Clock::now();
    }
  }
  bool recording_events() const { return recording_; }
  /// The recorded calls in the order they ended.
  const std::vector<Event>& events() const { return events_; }

  /// Entries in the order their layers first ran.
  const std::vector<Entry>& entries() const { return entries_; }
  /// Forgets every entry and event.
  void clear() {
    entries_.clear();
    index_.clear();
    events_.clear();
    origin_ = Clock::now();
  }

 private:
  std::vector<Entry> entries_;
  std::unordered_map<std::string, std::size_t> index_;
  std::vector<Event> events_;
  bool recording_ = false;
  Clock::time_point origin_ = Clock::now();
};

namespace detail {
/// Runs f() and, when `p` is set, books its wall-clock time under `name`.
template <class F>
decltype(auto) profiled(Profiler* p, const std::string& name, const char* kind, bool backward, F&& f) {
  if (!p) return f();
  const auto t0 = Profiler::Clock::now();
  decltype(auto) r = f();
  p->add(name, kind, backward, t0, Profiler::Clock::now());
  return r;
}

/// The parts of one call timed apart (Profiler::add with seconds): run(f)
/// times f() when `p` is set; book() books the parts as one call.
class PartTimer {
 public:
  explicit PartTimer(Profiler* p) : p_(p) {}
  template <class F>
  decltype(auto) run(F&& f) {
    if (!p_) return f();
    const auto t0 = Profiler::Clock::now();
    if (!parts_++) first_ = t0;
    struct Stop {  // adds the part's time however f() returns
      PartTimer& t;
      Profiler::Clock::time_point t0;
      ~Stop() { t.seconds_ += std::chrono::duration<double>(Profiler::Clock::now() - t0).count(); }
    } stop{*this, t0};
    return f();
  }
  void book(const std::string& name, const char* kind, bool backward) const {
    if (p_ && parts_) p_->add(name, kind, backward, first_, seconds_);
  }

 private:
  Profiler* p_;
  std::size_t parts_ = 0;
  Profiler::Clock::time_point first_{};
  double seconds_ = 0;
};
}  // namespace detail

}  // namespace cifarnet
