// cifarnet/distributed/buckets.hpp — the buckets of a gradient all-reduce
// overlapped with backward, shared by the MPI one (data_parallel.hpp,
// OverlappedAllReduce) and the NCCL one (nccl.hpp, NcclOverlappedAllReduce):
// which fixed-size chunks of the gradient buffer there are, in the order
// backward finishes them (last parameters first), and which may start once
// the model reports the gradients of parameters id, id+1, ... final
// (GradientSync::ready_from). Host logic only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <utility>
#include <vector>

#include "cifarnet/core/params.hpp"

namespace cifarnet::distributed {

class GradientBuckets {
 public:
  /// ready_from's answer when the report made no new gradient final.
  static constexpr std::size_t kNothingNew = std::numeric_limits<std::size_t>::max();

  /// Buckets of at most `per` elements over a gradient buffer of `size`
  /// elements laid out by `infos` (trainable parameters' offsets grow with
  /// their id; non-trainable state has no gradient).
  GradientBuckets(const std::vector<ParamInfo>& infos, std::size_t size, std::size_t per) : size_(size) {
    per = std::max<std::size_t>(1, per);
    for (std::size_t end = size; end > 0;) {  // last parameters first: the order backward finishes them in
      const std::size_t begin = end > per ? end - per : 0;
      buckets_.emplace_back(begin, end);
      end = begin;
    }
    // ready_offset_[id]: where the trainable gradients of parameters id,
    // id+1, ... begin.
    ready_offset_.assign(infos.size() + 1, size);
    for (std::size_t id = infos.size(); id-- > 0;)
      ready_offset_[id] = infos[id].trainable ? infos[id].offset : ready_offset_[id + 1];
  }

  /// A new backward pass: nothing final, nothing started.
  void begin() {
    next_ = 0;
    frontier_ = size_;
    early_ = 0;
  }
  /// The gradients of parameters first_param, first_param + 1, ... are
  /// final: calls start(begin, end) for each bucket that is now wholly
  /// final, in order, and returns how many it started (kNothingNew when the
  /// report made nothing new final).
  template <class Start>
  std::size_t ready_from(std::size_t first_param, Start&& start) {
    const std::size_t off = first_param < ready_offset_.size() ? ready_offset_[first_param] : size_;
    if (off >= frontier_) return kNothingNew;
    frontier_ = off;
    std::size_t n = 0;
    while (next_ < buckets_.size() && buckets_[next_].first >= frontier_) {
      start(buckets_[next_].first, buckets_[next_].second);
      ++next_;
      ++n;
      if (frontier_ > 0) ++early_;  // some gradient is still to be computed
    }
    return n;
  }
  /// Calls start(begin, end) for every bucket not started yet.
  template <class Start>
  void rest(Start&& start) {
    for (; next_ < buckets_.size(); ++next_) start(buckets_[next_].first, buckets_[next_].second);
  }

  /// Buckets (all-reduce calls) per step.
  std::size_t count() const { return buckets_.size(); }
  /// Buckets the last pass started while backward still had gradients to compute.
  std::size_t early() const { return early_; }
  /// The gradient buffer's size the buckets cover.
  std::size_t size() const { return size_; }

 private:
  std::size_t size_;
  std::vector<std::pair<std::size_t, std::size_t>> buckets_;  // [begin, end), in start order
  std::vector<std::size_t> ready_offset_;
  std::size_t next_ = 0, frontier_ = 0, early_ = 0;
};

}  // namespace cifarnet::distributed
