// cifarnet/core/params.hpp — the parameter arena and its visitor.
//
// Every parameter of a model lives in one of three contiguous allocations:
// trainable values, their gradients (same offsets), and non-trainable state
// (BN moving statistics). Each parameter has a stable hierarchical name
// ("stage1/block0/conv1/weights"), a shape, and flags (trainable, weight
// decay). Optimizers, clipping, EMA, checkpoints and all-reduce are flat
// passes over these buffers or walk the visitor; their per-parameter state is
// keyed by name or arena offset, never by address.
//
// Life cycle: layers add() their parameters while the model is built, then
// allocate() fixes the layout (no more add()), then initialize() fills them.
// Offsets are padded to 64 bytes; the padding is always zero.
//
// Versions: every parameter has a write counter, version(id), that changes
// whenever its values may have been written: a non-const access to it
// (value(id), for_each, initialize) or to a flat buffer holding it (values(),
// state()). Caches derived from a parameter (oneDNN's weights reordered into
// a primitive's layout, a conv+BN fold) compare versions, not values. Reads
// go through a const Parameters (std::as_const). A caller that keeps a
// pointer from a non-const access and writes through it again after the
// parameter was used calls touch(id) (or takes a fresh non-const access).
#pragma once

#include <Eigen/Core>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cifarnet/core/arena.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/init.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/core/tensor_memory.hpp"

namespace cifarnet {

/// What a layer asks for when it adds a parameter.
struct ParamSpec {
  std::string name;                ///< full hierarchical name
  std::vector<std::size_t> shape;  ///< TF order: conv HWIO, dense (in, out)
  bool trainable = true;           ///< false: state such as BN moving statistics
  Initializer init = Initializer::zeros();
};

/// A parameter's place in the arena.
struct ParamInfo : ParamSpec {
  std::size_t offset = 0;  ///< into values/grads (trainable) or state (non-trainable)
  std::size_t size = 0;    ///< number of elements
};

namespace detail {
/// A 64-byte aligned, zero-initialized buffer (host memory as tensors have
/// it: 2 MiB-aligned and advised as huge pages from 2 MiB,
/// core/tensor_memory.hpp).
template <class T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t n) { resize(n); }
  void resize(std::size_t n) {
    n_ = n;
    if (n == 0) {
      p_.reset();
      return;
    }
    const std::size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    try {
      p_ = host_unique<T>(bytes);
    } catch (const std::bad_alloc&) {
      throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
    }
    std::memset(static_cast<void*>(p_.get()), 0, bytes);
  }
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  std::size_t size() const { return n_; }

 private:
  std::unique_ptr<T, HostFree> p_;
  std::size_t n_ = 0;
};
}  // namespace detail

/// The parameter arena of one model.
template <class T = float>
class Parameters {
 public:
  using Scalar = T;
  using FlatMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>, Eigen::Aligned64>;
  using ConstFlatMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>, Eigen::Aligned64>;
  static constexpr std::size_t kAlign = 64 / sizeof(T) > 0 ? 64 / sizeof(T) : 1;

  /// Registers a parameter and returns its id. Names must be unique.
  std::size_t add(ParamSpec spec) {
    if (allocated_) throw Error("parameter '" + spec.name + "' added after the arena was allocated");
    if (index_.count(spec.name)) throw Error("duplicate parameter name '" + spec.name + "'");
    ParamInfo info;
    static_cast<ParamSpec&>(info) = std::move(spec);
    info.size = 1;
    for (auto d : info.shape) info.size *= d;
    std::size_t& end = info.trainable ? trainable_end_ : state_end_;
    info.offset = end;
    end += (info.size + kAlign - 1) / kAlign * kAlign;
    index_.emplace(info.name, infos_.size());
    // The first id requiring a gradient moves past the new one only when
    // none did before and the new one is state.
    if (first_requiring_grad_ == infos_.size() && !info.trainable) ++first_requiring_grad_;
    requires_grad_.push_back(info.trainable ? 1 : 0);
    infos_.push_back(std::move(info));
    writes_.push_back(0);
    return infos_.size() - 1;
  }

  /// Fixes the layout and allocates zeroed buffers.
  void allocate() {
    values_.resize(trainable_end_);
    grads_.resize(trainable_end_);
    state_.resize(state_end_);
    allocated_ = true;
  }
  bool allocated() const { return allocated_; }

  /// Fills every parameter with its initializer, in registration order.
  void initialize(Rng& rng) {
    for (std::size_t i = 0; i < infos_.size(); ++i) {
      const auto& p = infos_[i];
      p.init.fill(value(i), p.size, p.shape, rng);
    }
  }

  std::size_t count() const { return infos_.size(); }
  const ParamInfo& info(std::size_t id) const { return infos_.at(id); }
  const std::vector<ParamInfo>& infos() const { return infos_; }
  std::optional<std::size_t> find(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) return std::nullopt;
    return it->second;
  }
  /// Id of a parameter by name, or an Error naming it.
  std::size_t id(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) throw Error("no parameter named '" + name + "'");
    return it->second;
  }

  /// Values of parameter `id` (trainable or state). The non-const access
  /// counts as a write (version(id) changes).
  T* value(std::size_t id) {
    const auto& p = infos_[id];
    ++writes_[id];
    return (p.trainable ? values_.data() : state_.data()) + p.offset;
  }
  const T* value(std::size_t id) const {
    const auto& p = infos_[id];
    return (p.trainable ? values_.data() : state_.data()) + p.offset;
  }
  /// Gradient of a trainable parameter; nullptr for state.
  T* grad(std::size_t id) {
    const auto& p = infos_[id];
    return p.trainable ? grads_.data() + p.offset : nullptr;
  }
  const T* grad(std::size_t id) const {
    const auto& p = infos_[id];
    return p.trainable ? grads_.data() + p.offset : nullptr;
  }

  /// Whether backward computes parameter `id`'s gradient (run time; every
  /// trainable parameter does until set_requires_grad(id, false), state
  /// never does). Backward stops at the first layer below which no
  /// parameter requires a gradient and nothing needs the model's input
  /// gradient (RunContext::needs_dx): a frozen stem costs no backward pass.
  /// A parameter that does not require a gradient keeps its last gradient
  /// (not zeroed), so an optimizer must stop stepping it too.
  bool requires_grad(std::size_t id) const { return requires_grad_.at(id) != 0; }
  /// Turns parameter `id`'s gradient off (false) or back on (true; an Error
  /// for state, which has no gradient).
  void set_requires_grad(std::size_t id, bool on) {
    const auto& p = infos_.at(id);
    if (on && !p.trainable) throw Error("parameter '" + p.name + "' is state and has no gradient");
    requires_grad_[id] = on ? 1 : 0;
    update_first_requiring_grad();
  }
  /// The smallest id whose gradient is required (count() if none).
  std::size_t first_requiring_grad() const { return first_requiring_grad_; }

  /// Write counter of parameter `id` (never 0): equal versions mean the
  /// values were not written in between (see the file comment).
  std::uint64_t version(std::size_t id) const { return epoch_ + writes_[id]; }
  /// Marks parameter `id` (or every parameter) as written, for writes made
  /// through a pointer kept from an earlier non-const access.
  void touch(std::size_t id) { ++writes_.at(id); }
  void touch() { ++epoch_; }

  /// Element counts (without padding).
  std::size_t num_trainable() const { return sum_sizes(true); }
  std::size_t num_state() const { return sum_sizes(false); }

  /// The flat buffers (padded lengths; padding is zero). The non-const
  /// values() and state() count as a write of every parameter.
  FlatMap values() {
    ++epoch_;
    return FlatMap(values_.data(), Eigen::Index(values_.size()));
  }
  FlatMap grads() { return FlatMap(grads_.data(), Eigen::Index(grads_.size())); }
  FlatMap state() {
    ++epoch_;
    return FlatMap(state_.data(), Eigen::Index(state_.size()));
  }
  ConstFlatMap values() const { return ConstFlatMap(values_.data(), Eigen::Index(values_.size())); }
  ConstFlatMap grads() const { return ConstFlatMap(grads_.data(), Eigen::Index(grads_.size())); }
  ConstFlatMap state() const { return ConstFlatMap(state_.data(), Eigen::Index(state_.size())); }

  /// The flat-arena kernels of the backend this arena lives on (a Model
  /// installs its backend's); null until then (optim/ then runs the
  /// reference backend's host kernels).
  ArenaKernels<T>* kernels() const { return kernels_.get(); }
  void set_kernels(std::shared_ptr<ArenaKernels<T>> k) { kernels_ = std::move(k); }

  void zero_grad() {
    if (grads_.size()) std::memset(static_cast<void*>(grads_.data()), 0, grads_.size() * sizeof(T));
  }

  /// Calls f(const ParamInfo&, T* value, T* grad) for every parameter in
  /// registration order; grad is nullptr for non-trainable state.
  template <class F>
  void for_each(F&& f) {
    for (std::size_t i = 0; i < infos_.size(); ++i) f(infos_[i], value(i), grad(i));
  }
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < infos_.size(); ++i) f(infos_[i], value(i), grad(i));
  }

 private:
  std::size_t sum_sizes(bool trainable) const {
    std::size_t n = 0;
    for (const auto& p : infos_)
      if (p.trainable == trainable) n += p.size;
    return n;
  }
  void update_first_requiring_grad() {
    first_requiring_grad_ = 0;
    while (first_requiring_grad_ < requires_grad_.size() && !requires_grad_[first_requiring_grad_])
      ++first_requiring_grad_;
  }

  std::vector<ParamInfo> infos_;
  std::unordered_map<std::string, std::size_t> index_;
  std::size_t trainable_end_ = 0, state_end_ = 0;
  detail::AlignedBuffer<T> values_, grads_, state_;
  std::vector<std::uint64_t> writes_;  // per parameter; version = epoch_ + writes_
  std::vector<char> requires_grad_;    // per parameter (requires_grad)
  std::size_t first_requiring_grad_ = 0;
  std::uint64_t epoch_ = 1;
  std::shared_ptr<ArenaKernels<T>> kernels_;
  bool allocated_ = false;
};

}  // namespace cifarnet
